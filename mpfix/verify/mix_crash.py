"""A run that crashed on a float16/float32 mix, and the casts ``mpfix repair`` tries there.

TensorFlow never promotes: ``float16 + float32`` raises. The error names the op and which of
its inputs is float16 (TF 2.21, measured on CPU):

* traced (``tf.function``): ``Input 'y' of 'AddV2' Op has type float16 that does not match
  type float32 of argument 'x'.``
* eager: ``cannot compute AddV2 as input #1(zero-based) was expected to be a float tensor
  but is a half tensor [Op:AddV2]``
* a division, either way: ``\\`x\\` and \\`y\\` must have the same dtype, got tf.float32 != tf.float16.``

``read(message)`` gives the op and the side; ``sites(text, line, mix)`` the expressions on
the crash's line that spell that op (``+`` or ``tf.add``, ``@`` or ``tf.matmul``...); and
``cast_at(text, line, mix, site, upcast)`` writes one cast: the float16 operand to float32
(``upcast``: a loss term, numerically the safe side), or the float32 operand to the float16
operand's dtype (``self.compute_dtype`` in a layer's method, as MP206's fix writes it). Each
is only a candidate: repair keeps it when the next run no longer crashes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from mpfix.verify import islands

# TF op -> (Python operator, function names that spell it).
SPELLINGS: dict[str, tuple[str | None, frozenset[str]]] = {
    "AddV2": ("+", frozenset({"add"})),
    "Add": ("+", frozenset({"add"})),
    "Sub": ("-", frozenset({"subtract"})),
    "Mul": ("*", frozenset({"multiply"})),
    "RealDiv": ("/", frozenset({"divide", "truediv"})),
    "MatMul": ("@", frozenset({"matmul"})),
    "BatchMatMulV2": ("@", frozenset({"matmul"})),
    "Maximum": (None, frozenset({"maximum"})),
    "Minimum": (None, frozenset({"minimum"})),
    "SquaredDifference": (None, frozenset({"squared_difference"})),
    "Pow": ("**", frozenset({"pow"})),
}
_ARGUMENT_INDEX = {"x": 0, "a": 0, "y": 1, "b": 1}
_FLOAT16 = {"float16", "half"}
_GRAPH = re.compile(r"Input '(\w+)' of '(\w+)' Op has type (\w+) that does not match type (\w+) of argument '(\w+)'")
_EAGER = re.compile(r"cannot compute (\w+) as input #(\d+)\(zero-based\) was expected to be a (\w+) tensor "
                    r"but is a (\w+) tensor")
_DIVISION = re.compile(r"`x` and `y` must have the same dtype, got tf\.(\w+) != tf\.(\w+)")


@dataclass(frozen=True)
class Mix:
    op: str  # a key of SPELLINGS
    float16_input: int  # 0: the left operand / first argument is float16; 1: the right / second


def read(message: str) -> Mix | None:
    """The mix a crash's message describes, or None (not a float16/float32 mix of two inputs)."""
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


def _operands(node) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    if isinstance(node, cst.BinaryOperation):
        return node.left, node.right
    positional = [a for a in node.args if a.keyword is None and not a.star]
    return (positional[0].value, positional[1].value) if len(positional) >= 2 else None


def _spells(node, mix: Mix) -> bool:
    operator, names = SPELLINGS[mix.op]
    if isinstance(node, cst.BinaryOperation):
        return operator is not None and islands._spelling(node) == operator
    return isinstance(node, cst.Call) and islands._call_name(node) in names


def _found(text: str, line: int, mix: Mix):
    module = islands._parsed(text)
    if module is None:
        return None, [], {}
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    parents = wrapper.resolve(ParentNodeProvider)
    found = []
    for node, pos in positions.items():
        if isinstance(node, (cst.BinaryOperation, cst.Call)) and pos.start.line <= line <= pos.end.line \
                and _spells(node, mix) and _operands(node) is not None:
            found.append((pos.start.line != line, pos.end.line - pos.start.line, pos.start.column, node))
    # Those starting on the line first, then the narrowest: the op the error names is most
    # likely the one the traceback's line holds.
    found.sort(key=lambda t: t[:3])
    return module, [node for *_, node in found], parents


def _is_literal(expr) -> bool:
    if isinstance(expr, cst.UnaryOperation):
        expr = expr.expression
    return isinstance(expr, (cst.Integer, cst.Float))


def _tensor_of(expr):
    """The tensor a scaled operand holds: ``reg`` of ``1e-6 * reg`` (cast there, the scaling
    happens in float32 too)."""
    while isinstance(expr, cst.BinaryOperation) and islands._spelling(expr) in ("*", "/", "+", "-"):
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
        module, nodes, _ = _found(text, line, mix)
    except RecursionError:
        return []
    out = []
    for node in nodes[:3]:
        pair = _operands(node)
        half, single = pair[mix.float16_input], pair[1 - mix.float16_input]
        if _is_literal(half) or _is_literal(single):
            continue  # a Python number is weakly typed: not one of the two tensors
        out.append(Site(module.code_for_node(_tensor_of(half)), module.code_for_node(single)))
    return out


def cast_at(text: str, line: int, mix: Mix, site: int, upcast: bool) -> str | None:
    """``text`` with one cast at the ``site``-th expression of ``sites``; None when it does not apply."""
    try:
        module, nodes, parents = _found(text, line, mix)
    except RecursionError:
        return None
    nodes = [n for n in nodes[:3] if not any(_is_literal(e) for e in _operands(n))]
    if module is None or site >= len(nodes):
        return None
    node = nodes[site]
    half, single = (lambda pair: (pair[mix.float16_input], pair[1 - mix.float16_input]))(_operands(node))
    style = islands._Style(module)
    if upcast:
        old = _tensor_of(half)
        new = style.cast(old)
    else:
        if islands._in_method(node, parents):
            dtype = cst.parse_expression("self.compute_dtype")
        elif isinstance(_tensor_of(half), (cst.Name, cst.Attribute)):
            dtype = cst.Attribute(value=_tensor_of(half), attr=cst.Name("dtype"))
        else:
            return None
        old, new = single, style.cast(single, dtype)
    result = module.visit(islands._Replace({old: new})).code
    return result if result != text else None


def in_method_at(text: str, line: int) -> bool:
    """Whether the innermost function around ``line`` is a method taking ``self`` (a layer's ``call``)."""
    module = islands._parsed(text)
    if module is None:
        return False
    try:
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    except RecursionError:
        return False
    around = [(pos.start.line, node) for node, pos in positions.items()
              if isinstance(node, cst.FunctionDef) and pos.start.line <= line <= pos.end.line]
    if not around:
        return False
    params = max(around, key=lambda t: t[0])[1].params.params
    return bool(params) and params[0].name.value == "self"
