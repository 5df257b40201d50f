"""A Keras 3 run that crashed summing a float16 layer loss with its float32 losses, and the changes repair tries.

Keras 3's ``Trainer.compute_loss`` puts the compiled loss (float32) and every layer loss (``Layer.losses``: what
a layer's ``activity_regularizer`` gives for its output, what ``add_loss`` was given) in one list and sums it with
``ops.sum``; a layer loss computed in the layer's float16 compute dtype makes the list's conversion raise (Keras
3.15, TF 2.21, measured)::

    TypeError: Cannot convert a list containing a tensor of dtype <dtype: 'float16'> to <dtype: 'float32'>
    (Tensor is: <tf.Tensor 'Sum:0' shape=() dtype=float16>)

The error is raised at ``fit``'s line and names only the tensor's op. tf_keras adds the same penalty as it is
(no crash; turn 16's activity_l1: an L1 penalty over 16 x 2048 activations past 65504 there). The changes, for each
layer the user's files build with an ``activity_regularizer`` (Keras' own argument, its value called on the layer's
float16 output): a regulariser that is a function of the same file computes its returned value in float32 and
returns it as float32 (``float32_return``: a penalty past 65504 stays finite; float32 is what the sum wants), then
``dtype="float32"`` on that layer. Each is only a candidate: repair keeps it when the next run is healthy and agrees
with float32.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider

from mpfix.verify.cst_edits import CastStyle, Replace, call_name, parsed, resolve_positions

_MESSAGE = re.compile(r"Cannot convert a list containing a tensor of dtype <dtype: 'float16'> to "
                      r"<dtype: 'float32'> \(Tensor is: <tf\.Tensor '([^':]+)")
# The Keras layer argument whose value Keras calls on the layer's output and adds to the layer's losses.
ACTIVITY_REGULARIZER = "activity_regularizer"


def read(message: str) -> str | None:
    """The name of the float16 tensor in the list whose conversion crashed (None: another error)."""
    found = _MESSAGE.search(message or "")
    return found.group(1) if found else None


@dataclass
class Regularised:
    """A layer built with an activity regulariser: its constructor's line and class, and the line of the ``return``
    of the regulariser function (None: not a function of this file with one ``return``)."""

    line: int
    class_name: str
    anchor: str
    returns: int | None
    function: str | None


def regularised(text: str) -> list[Regularised]:
    """The layers ``text`` builds with an ``activity_regularizer``, in order."""
    module = parsed(text)
    if module is None:
        return []
    try:
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = resolve_positions(wrapper)
    except RecursionError:
        return []
    functions: dict[str, list[int]] = {}
    for node in module.body:
        if isinstance(node, cst.FunctionDef):
            returns = [positions[n].start.line for n in positions if isinstance(n, cst.Return)
                       and positions[node].start.line <= positions[n].start.line <= positions[node].end.line]
            functions[node.name.value] = returns
    lines = text.splitlines()
    out = []
    for node, pos in positions.items():
        if not isinstance(node, cst.Call):
            continue
        arg = next((a for a in node.args if a.keyword is not None and a.keyword.value == ACTIVITY_REGULARIZER), None)
        name = call_name(node)
        if arg is None or not name:
            continue
        function = arg.value.value if isinstance(arg.value, cst.Name) else None
        returns = functions.get(function or "", [])
        line = pos.start.line
        out.append(Regularised(line, name, lines[line - 1].strip(), returns[0] if len(returns) == 1 else None,
                               function if len(returns) == 1 else None))
    return sorted(out, key=lambda r: r.line)


class _CastNames(cst.CSTTransformer):
    """Each parameter read in the returned expression cast to float32."""

    def __init__(self, style: CastStyle, params: frozenset[str]) -> None:
        self.style, self.params, self.count = style, params, 0

    def leave_Name(self, original_node, updated_node):
        if original_node.value in self.params:
            self.count += 1
            return self.style.cast(updated_node)
        return updated_node


def float32_return(text: str, line: int) -> str | None:
    """``text`` with the function whose ``return`` is at ``line`` computing the returned value from its parameters
    cast to float32, returned as float32 (no cast back); None when it does not apply."""
    module = parsed(text)
    if module is None:
        return None
    try:
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = resolve_positions(wrapper)
        parents = wrapper.resolve(ParentNodeProvider)
    except RecursionError:
        return None
    node = next((n for n, p in positions.items() if isinstance(n, cst.Return) and p.start.line == line
                 and n.value is not None), None)
    function = parents.get(node) if node is not None else None
    while function is not None and not isinstance(function, cst.FunctionDef):
        function = parents.get(function)
    if function is None:
        return None
    params = frozenset(p.name.value for p in function.params.params)
    caster = _CastNames(CastStyle(module), params)
    value = node.value.visit(caster)
    if caster.count == 0:
        return None
    result = module.visit(Replace({node.value: value})).code
    return result if result != text else None
