"""A run that crashed on a float16/float32 mix, and the casts ``mpfix repair`` tries there.

TensorFlow never promotes: ``float16 + float32`` raises. The error names the op and which of
its inputs is float16 (TF 2.21, measured on CPU):

* traced (``tf.function``): ``Input 'y' of 'AddV2' Op has type float16 that does not match
  type float32 of argument 'x'.``
* eager: ``cannot compute AddV2 as input #1(zero-based) was expected to be a float tensor
  but is a half tensor [Op:AddV2]``
* a division, either way: ``\\`x\\` and \\`y\\` must have the same dtype, got tf.float32 != tf.float16.``
* a list op (``tf.concat``, ``tf.stack``), traced: ``Tensors in list passed to 'values' of
  'ConcatV2' Op have types [float16, float32] that don't all match.``; eager, as above with
  ``ConcatV2``/``Pack`` (input #1 against the first element: a two-element list only).
* a float16 value assigned into a float32 variable (``v.assign_add(x)``, a metric's state):
  ``Tensor conversion requested dtype float32 for Tensor with dtype float16``; the value is cast.

``read(message)`` gives the op and the side; ``sites(text, line, mix)`` the expressions on
the crash's line that spell that op (``+`` or ``tf.add``, ``@`` or ``tf.matmul``, a literal
list in ``tf.concat``...); and ``cast_at(text, line, mix, site, upcast)`` writes the casts:
the float16 operands to float32 (``upcast``: a loss term, numerically the safe side), or the
float32 operands to the float16 operand's dtype (``self.compute_dtype`` in a layer's method, as MP206's fix writes it). Each
is only a candidate: repair keeps it when the next run no longer crashes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider

from mpfix.codemods.facts import ops
from mpfix.verify import cst_edits


def _spellings(graph_op: str, binary: bool) -> frozenset[str]:
    """The call names of ``graph_op`` whose first two positional arguments are its two tensors (``binary``), or whose
    first is the list of tensors (not ``einsum``, whose first is the equation)."""
    return frozenset(spec.short for spec in ops.graph_specs(graph_op)
                     if spec.tensor_list != binary and (not binary or spec.dtype_args[:2] == (0, 1)))


def _operator(graph_op: str) -> str | None:
    return next((o for o, built in ops.OPERATOR_OPS.items() if graph_op in built), None)


# TF op -> (Python operator, function names that spell it): the table's binary ops that refuse mixed tensors
# (``same_dtype``), and tf.pow, which raises on them too (TF 2.21: "cannot compute Pow as input #1(zero-based) was
# expected to be a half tensor but is a float tensor") though the table leaves a Python number's promotion to it.
SPELLINGS: dict[str, tuple[str | None, frozenset[str]]] = {
    graph_op: (_operator(graph_op), names) for graph_op in ops.GRAPH_OPS
    if (names := _spellings(graph_op, True)) and (graph_op == "Pow" or any(
        spec.same_dtype and not spec.tensor_list for spec in ops.graph_specs(graph_op)))
}
# A float16 value assigned into a float32 variable (a metric's `self.total.assign_add(reduce_sum(x))`): the
# variable is the float32 side, the value the float16 one.
SPELLINGS["Assign"] = (None, frozenset({"assign", "assign_add", "assign_sub"}))
# TF op -> function names taking a list of tensors (``tf.concat([a, b], axis)``).
LIST_OPS: dict[str, frozenset[str]] = {
    graph_op: names for graph_op in ops.GRAPH_OPS if (names := _spellings(graph_op, False))
    and any(spec.same_dtype for spec in ops.graph_specs(graph_op))
}
_ARGUMENT_INDEX = {"x": 0, "a": 0, "y": 1, "b": 1}
_FLOAT16 = {"float16", "half"}
_GRAPH = re.compile(r"Input '(\w+)' of '(\w+)' Op has type (\w+) that does not match type (\w+) of argument '(\w+)'")
_EAGER = re.compile(r"cannot compute (\w+) as input #(\d+)\(zero-based\) was expected to be a (\w+) tensor "
                    r"but is a (\w+) tensor")
_DIVISION = re.compile(r"`x` and `y` must have the same dtype, got tf\.(\w+) != tf\.(\w+)")
_CONVERSION = re.compile(r"Tensor conversion requested dtype (\w+) for Tensor with dtype (\w+)")
_LIST = re.compile(r"Tensors in list passed to 'values' of '(\w+)' Op have types \[([\w, ]+)\] that don't all match")


@dataclass(frozen=True)
class Mix:
    op: str  # a key of SPELLINGS or LIST_OPS
    float16_input: int  # 0: the left operand / first argument is float16; 1: the right / second
    # A list op (``tf.concat``): whether each element of the list is float16, in order.
    elements: tuple[bool, ...] = ()


def read(message: str) -> Mix | None:
    """The mix a crash's message describes, or None (not a float16/float32 mix of two inputs)."""
    if m := _LIST.search(message):
        types = [t.strip() for t in m.group(2).split(",")]
        if m.group(1) not in LIST_OPS or set(types) != {"float16", "float32"}:
            return None
        return Mix(m.group(1), types.index("float16"), tuple(t == "float16" for t in types))
    if (m := _EAGER.search(message)) and m.group(1) in LIST_OPS:
        # Eager: input #N against the first element; only a two-element list is known whole.
        index, expected, actual = int(m.group(2)), m.group(3), m.group(4)
        if index != 1 or {expected, actual} != {"float", "half"}:
            return None
        return Mix(m.group(1), 1 if actual in _FLOAT16 else 0, (expected in _FLOAT16, actual in _FLOAT16))
    if m := _GRAPH.search(message):
        name, op, dtype, other_dtype, _ = m.groups()
        index = _ARGUMENT_INDEX.get(name)
        if index is None or op not in SPELLINGS or {dtype, other_dtype} != {"float16", "float32"}:
            return None
        return Mix(op, index if dtype in _FLOAT16 else 1 - index)
    if m := _EAGER.search(message):
        op, index, expected, actual = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        if op not in SPELLINGS or index not in (0, 1) or {expected, actual} != {"float", "half"}:
            return None
        return Mix(op, index if actual in _FLOAT16 else 1 - index)
    if (m := _CONVERSION.search(message)) and m.groups() == ("float32", "float16"):
        return Mix("Assign", 0)
    if m := _DIVISION.search(message):
        left, right = m.groups()
        if {left, right} != {"float16", "float32"}:
            return None
        return Mix("RealDiv", 0 if left in _FLOAT16 else 1)
    return None


@dataclass(frozen=True)
class Site:
    """One expression on the line that spells the mixed op: its operands' source."""

    float16: str
    float32: str
    # Inside a method taking ``self`` (a layer's ``call``): the float32 side goes to
    # ``self.compute_dtype`` first.
    in_method: bool = False


def _groups(node, mix: Mix):
    """(float16 operands, float32 operands) of an expression spelling the mixed op, or None."""
    if mix.elements:
        positional = [a for a in node.args if a.keyword is None and not a.star]
        values = positional[0].value if positional else None
        if not isinstance(values, (cst.List, cst.Tuple)) or len(values.elements) != len(mix.elements) \
                or any(isinstance(e, cst.StarredElement) for e in values.elements):
            return None
        pairs = list(zip((e.value for e in values.elements), mix.elements))
        return [e for e, half in pairs if half], [e for e, half in pairs if not half]
    if isinstance(node, cst.BinaryOperation):
        pair = (node.left, node.right)
    else:
        positional = [a for a in node.args if a.keyword is None and not a.star]
        if mix.op == "Assign":
            if len(positional) != 1 or not isinstance(node.func, cst.Attribute):
                return None
            return [positional[0].value], [node.func.value]
        if len(positional) < 2:
            return None
        pair = (positional[0].value, positional[1].value)
    return [pair[mix.float16_input]], [pair[1 - mix.float16_input]]


def _spells(node, mix: Mix) -> bool:
    if mix.op in LIST_OPS:
        return isinstance(node, cst.Call) and cst_edits.call_name(node) in LIST_OPS[mix.op]
    operator, names = SPELLINGS[mix.op]
    if isinstance(node, cst.BinaryOperation):
        return operator is not None and cst_edits.spelling(node) == operator
    return isinstance(node, cst.Call) and cst_edits.call_name(node) in names


def _is_literal(expr) -> bool:
    if isinstance(expr, cst.UnaryOperation):
        expr = expr.expression
    return isinstance(expr, (cst.Integer, cst.Float))


def _found(text: str, line: int, mix: Mix):
    """The module, the (float16, float32) operand groups of each expression on ``line`` that
    spells the op (at most 3; none with a Python number, which is weakly typed), and the parents."""
    module = cst_edits.parsed(text)
    if module is None:
        return None, [], {}
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = cst_edits.resolve_positions(wrapper)
    parents = wrapper.resolve(ParentNodeProvider)
    found = []
    for node, pos in positions.items():
        if isinstance(node, (cst.BinaryOperation, cst.Call)) and pos.start.line <= line <= pos.end.line \
                and _spells(node, mix):
            groups = _groups(node, mix)
            if groups is not None and groups[0] and groups[1] and not any(map(_is_literal, groups[0] + groups[1])):
                found.append((pos.start.line != line, pos.end.line - pos.start.line, pos.start.column, node, groups))
    # Those starting on the line first, then the narrowest: the op the error names is most
    # likely the one the traceback's line holds.
    found.sort(key=lambda t: t[:3])
    return module, [(node, groups) for *_, node, groups in found[:3]], parents


def _tensor_of(expr):
    """The tensor a scaled operand holds: ``reg`` of ``1e-6 * reg`` (cast there, the scaling
    happens in float32 too)."""
    while isinstance(expr, cst.BinaryOperation) and cst_edits.spelling(expr) in ("*", "/", "+", "-"):
        if _is_literal(expr.left) and not _is_literal(expr.right):
            expr = expr.right
        elif _is_literal(expr.right) and not _is_literal(expr.left):
            expr = expr.left
        else:
            break
    return expr


def sites(text: str, line: int, mix: Mix) -> list[Site]:
    """The expressions on ``line`` spelling the mixed op (at most 3), with their operands."""
    try:
        module, found, parents = _found(text, line, mix)
    except RecursionError:
        return []
    return [Site(", ".join(module.code_for_node(_tensor_of(h)) for h in halves),
                 ", ".join(module.code_for_node(f) for f in singles), cst_edits.in_method(node, parents))
            for node, (halves, singles) in found]


def cast_at(text: str, line: int, mix: Mix, site: int, upcast: bool) -> str | None:
    """``text`` with the casts at the ``site``-th expression of ``sites``; None when they do not apply."""
    try:
        module, found, parents = _found(text, line, mix)
    except RecursionError:
        return None
    if module is None or site >= len(found):
        return None
    node, (halves, singles) = found[site]
    if mix.op == "Assign" and not upcast:
        return None  # a variable's dtype is its own: only the value assigned into it is cast
    style = cst_edits.CastStyle(module)
    if upcast:
        replacements = {_tensor_of(h): style.cast(_tensor_of(h)) for h in halves}
    else:
        if cst_edits.in_method(node, parents):
            dtype = cst.parse_expression("self.compute_dtype")
        elif isinstance(_tensor_of(halves[0]), (cst.Name, cst.Attribute)):
            dtype = cst.Attribute(value=_tensor_of(halves[0]), attr=cst.Name("dtype"))
        else:
            return None
        replacements = {f: style.cast(f, dtype) for f in singles}
    result = module.visit(cst_edits.Replace(replacements)).code
    return result if result != text else None
