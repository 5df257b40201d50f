"""A step that scales its loss by hand with a fixed factor (Apex-style static loss scaling): MP101's exception.

``scaled = loss * 1024`` inside the tape, ``tape.gradient(scaled, ...)``, the gradients divided by the same
factor before the update: the float16 gradients are scaled out of the subnormal range and the update gets
plain gradients, so the optimizer needs no LossScaleOptimizer. Wrapping it anyway scales twice (held-out
static_scale_ln_k3_ok, wave 16: MP101's fix made every step non-finite, the step guard skipped them all and
the loss stayed at 1.322; as written it trains). No rules live here.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._mp_api_support import number_value
from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.gradient_path import Analysis, Flow, assigned_targets
from mpfix.codemods.names import dotted_name

# The smallest factor read as a loss scale: Apex's smallest static default is 128; a factor of 2 or 10 is a
# loss weight, which leaves float16 gradients as small as they were.
MIN_FACTOR = 128.0
_DIVIDE_CALLS = ("divide", "truediv", "div")


def _module_number(analysis: Analysis, name: str) -> float | None:
    """The number a module-level ``NAME = 1024.0`` (or ``A, NAME = 3, 2 ** 10``) binds, if bound once."""
    found: list[float | None] = []
    for st in analysis.scopes[0].statements:
        for target, value in assigned_targets(st.node):
            if isinstance(target, cst.Name) and target.value == name:
                found.append(_number(analysis, value, module=False))
            elif isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) \
                    and len(target.elements) == len(value.elements):
                for t, v in zip(target.elements, value.elements):
                    if isinstance(t.value, cst.Name) and t.value.value == name:
                        found.append(_number(analysis, v.value, module=False))
    return found[0] if len(found) == 1 else None


def _number(analysis: Analysis, node: cst.BaseExpression | None, module: bool = True) -> float | None:
    if node is None:
        return None
    value = number_value(node)
    if value is not None:
        return value
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Power, cst.Multiply)):
        left, right = _number(analysis, node.left, module), _number(analysis, node.right, module)
        if left is None or right is None:
            return None
        return left ** right if isinstance(node.operator, cst.Power) else left * right
    if module and isinstance(node, cst.Name):
        return _module_number(analysis, node.value)
    return None


def _factor(analysis: Analysis, flow: Flow) -> float | None:
    """The fixed factor the gradient's target multiplies the loss by, read at its binding in the step."""
    target = flow.gradient.target
    if isinstance(target, cst.Name):
        bound = None
        for st in flow.scope.statements:
            if st is flow.gradient.statement:
                break
            for t, value in assigned_targets(st.node):
                if isinstance(t, cst.Name) and t.value == target.value:
                    bound = value
        target = bound
    if not isinstance(target, cst.BinaryOperation) or not isinstance(target.operator, cst.Multiply):
        return None
    factor = _number(analysis, target.right)
    factor = factor if factor is not None else _number(analysis, target.left)
    return factor if factor is not None and factor >= MIN_FACTOR else None


def _divides_by(analysis: Analysis, node: cst.CSTNode, factor: float) -> bool:
    """``node`` divides something by ``factor`` (``g / K``, ``tf.math.divide(g, K)``)."""
    for sub in walk(node):
        if isinstance(sub, cst.BinaryOperation) and isinstance(sub.operator, cst.Divide) \
                and _number(analysis, sub.right) == factor:
            return True
        if isinstance(sub, cst.Call) and (dotted_name(sub.func) or "").rpartition(".")[2] in _DIVIDE_CALLS \
                and len(sub.args) == 2 and _number(analysis, sub.args[1].value) == factor:
            return True
    return False


def manually_scaled(analysis: Analysis, flow: Flow) -> bool:
    """The step takes the gradient of its loss times a fixed factor >= 128 and divides the gradients by the same
    factor between the gradient and the update (in the step's own function)."""
    factor = _factor(analysis, flow)
    if factor is None:
        return False
    statements = flow.scope.statements
    start = next((i for i, st in enumerate(statements) if st is flow.gradient.statement), None)
    end = next((i for i, st in enumerate(statements) if st is flow.apply.statement), None)
    if start is None or end is None or end < start:
        return False
    return any(_divides_by(analysis, st.node, factor) for st in statements[start:end + 1]
               if isinstance(st.node, cst.SimpleStatementLine))
