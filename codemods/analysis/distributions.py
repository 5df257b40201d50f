"""Parameters that hold a probability distribution: every value the file gives them sums to at most 1.

A function's parameter is a distribution when each call of this file passes one (a softmax/sigmoid output, a
clip to [.., 1], another distribution parameter), or when the function is handed on under a callback name whose
contract says so (``keras_layers.CALLBACK_DISTRIBUTIONS``: a seq2seq ``probability_fn(score, state)`` gets the
previous alignments as ``state``). Any other use of the function (called elsewhere, handed on under another
name) leaves it unknown. C25: addons ``attention_wrapper.py:947`` ``tf.cumsum(previous_attention)`` is at most 1.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import nodes_by_type, walk
from mpfix.codemods.analysis.dtype_lattice import argument, first_arg
from mpfix.codemods.facts import keras_layers
from mpfix.codemods.facts import ops as op_table

_DEPTH = 3
_PARTIAL = "functools.partial"


def distribution(context, facts, node: cst.BaseExpression, depth: int = 0) -> bool:
    """``node`` is a distribution parameter of its function (or that parameter passed through ``convert_to_tensor``
    and the like, ``x = tf.convert_to_tensor(x)``)."""
    if depth > _DEPTH or not isinstance(node, cst.Name):
        return False
    for value in facts.values_of(node):
        inner = first_arg(value) if isinstance(value, cst.Call) else None
        spec = op_table.lookup(context.resolve(value.func)) if inner is not None else None
        if spec is None or not spec.keeps_value or not isinstance(inner, cst.Name) or inner.value != node.value:
            return False  # rebound to something else
    place = facts.place(node)
    function = place.function if place is not None else None
    if function is None:
        return False
    params = [p.name.value for p in [*function.params.posonly_params, *function.params.params]]
    if node.value not in params or (params and params[0] in ("self", "cls")):
        return False  # module functions only: a method's callers are its class's business
    return _every_use_passes_one(context, facts, function, params.index(node.value), node.value, depth)


def _every_use_passes_one(context, facts, function: cst.FunctionDef, position: int, name: str, depth: int) -> bool:
    index = nodes_by_type(context)
    fname = function.name.value
    uses = sum(1 for n in index.get(cst.Name, ()) if n.value == fname) - 1  # less the `def` name
    seen = 0
    for call in facts.all_calls:
        if isinstance(call.func, cst.Name) and call.func.value == fname:
            seen += 1
            passed = argument(call, name, position)
            if passed is None or not (facts.at_most_one(passed.value) or
                                      distribution(context, facts, passed.value, depth + 1)):
                return False
        elif context.resolve(call.func) == _PARTIAL and isinstance(first_arg(call), cst.Name) and \
                first_arg(call).value == fname:
            seen += 1
            if argument(call, name, None) is not None or not _handed_on_as_distribution(index, call, position):
                return False
    return seen > 0 and seen == uses


def _handed_on_as_distribution(index, partial: cst.Call, position: int) -> bool:
    """``partial`` (or the one name it is bound to) is passed only under a callback name whose parameter
    ``position`` is a distribution (``probability_fn=wrapped``)."""
    def callback_position(holder: cst.BaseExpression) -> bool:
        return any(arg.value is holder and arg.keyword is not None and
                   position in keras_layers.CALLBACK_DISTRIBUTIONS.get(arg.keyword.value, ())
                   for call in index.get(cst.Call, ()) for arg in call.args)

    if callback_position(partial):
        return True
    bound = [a for a in index.get(cst.Assign, ()) if a.value is partial]
    if len(bound) != 1 or len(bound[0].targets) != 1 or not isinstance(bound[0].targets[0].target, cst.Name):
        return False
    held = bound[0].targets[0].target.value
    # The name is local to the function that binds it (another method may bind the same name to something else).
    scopes = [nodes for nodes in (set(walk(f)) for f in index.get(cst.FunctionDef, ())) if bound[0] in nodes]
    if not scopes:
        return False
    scope = min(scopes, key=len)
    uses = [n for n in index.get(cst.Name, ()) if n.value == held and n in scope and n is not bound[0].targets[0].target]
    return bool(uses) and all(callback_position(n) for n in uses)
