"""A parameter's literal default as the value the function runs with, when no call in the file can pass another."""

from __future__ import annotations

import libcst as cst


def unpassed_default(func: cst.CSTNode, name: str, calls: list[cst.Call]) -> cst.BaseExpression | None:
    """The default of parameter ``name`` of ``func`` when no call in the file may pass it: none by keyword
    (to any callee: ``partial(f, eps=...)``, ``layer(x, eps=...)``), none by position or ``*``/``**`` to a
    callee spelled ``func``'s name. Keras calls a compiled loss with two arguments, so ``eps=1e-8`` of
    ``def loss(y_true, y_pred, eps=1e-8)`` is 1e-8 wherever the loss runs (wave 15's SI-SDR loss)."""
    if not isinstance(func, cst.FunctionDef):
        return None
    positional = [*func.params.posonly_params, *func.params.params]
    found = [p for p in [*positional, *func.params.kwonly_params] if p.name.value == name]
    if not found or found[0].default is None:
        return None
    param = found[0]
    index = next((i for i, p in enumerate(positional) if p is param), None)
    if index is not None and positional and positional[0].name.value in ("self", "cls"):
        index -= 1  # `self.f(a, b)`: the bound argument is not written
    for call in calls:
        if any(a.keyword is not None and a.keyword.value == name for a in call.args):
            return None
        callee = call.func.attr if isinstance(call.func, cst.Attribute) else call.func
        if not (isinstance(callee, cst.Name) and callee.value == func.name.value):
            continue
        if any(a.star for a in call.args):
            return None
        if index is not None and sum(a.keyword is None for a in call.args) > index:
            return None
    return param.default
