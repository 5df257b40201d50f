"""MP303's query: loss-scaling calls of the other Keras generation, and the translation of each.

Keras 3 runs: ``get_scaled_loss`` becomes ``scale_loss`` and ``get_unscaled_gradients`` is dropped
(Keras 3's ``apply_gradients`` unscales), paired into one fix. Keras 2 runs: ``scale_loss`` becomes
``get_scaled_loss`` and the gradient taken of it gets ``get_unscaled_gradients``. Each finding is a
``Translation`` the rule (``keras2_scaling_on_keras3.py``) reports as it is; no rule lives here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from mpfix.codemods import _api_table as table
from mpfix.codemods._gradient_fixes import describe, move_clip_changes
from mpfix.codemods._walk import find_all
from mpfix.codemods.analysis.gradient_path import UNSCALE, UNSCALE_METHOD, assigned_targets, training_steps
from mpfix.codemods.names import dotted_name
from mpfix.findings import FixSafety

_ATOMIC = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.List, cst.Tuple, cst.Dict, cst.Set,
           cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.SimpleString, cst.Integer, cst.Float)
K2_SCALE, K2_UNSCALE, K3_SCALE = "get_scaled_loss", "get_unscaled_gradients", "scale_loss"


@dataclass
class Translation:
    """One finding: the call, the template that says what is wrong (with its fields), and the fix."""

    call: cst.Call
    template: str
    fix: dict | None = None
    safety: FixSafety | None = None
    description: str | None = None
    note: str | None = None
    fields: dict[str, str] = field(default_factory=dict)


def method_call(node: cst.Call, method: str) -> bool:
    return (isinstance(node.func, cst.Attribute) and node.func.attr.value == method
            and len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star)


def _unwrapped(value: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(value, _ATOMIC) or value.lpar:
        return value
    return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


class Scaling:
    """The other generation's scaling calls of one file (built on first need, one per rule instance)."""

    def __init__(self, context) -> None:
        self.context = context
        self._custom: dict[str, bool] = {}
        self._in_place: dict[cst.Call, cst.SimpleStatementLine] | None = None

    def custom(self, method: str) -> bool:
        """The module defines a function ``method`` itself (a custom optimizer, not Keras')."""
        if method not in self._custom:
            self._custom[method] = any(True for _ in find_all(self.context.module, cst.FunctionDef,
                                                              lambda f: f.name.value == method))
        return self._custom[method]

    # -- Keras 3 runs: Keras 2 calls ----------------------------------------------------
    def of_keras2_call(self, node: cst.Call) -> Translation | None:
        if method_call(node, K2_SCALE) and not self.custom(K2_SCALE):
            return self._scaled_loss(node)
        if method_call(node, K2_UNSCALE) and not self.custom(K2_UNSCALE):
            return self._unscale(node)
        return None

    def _scaled_loss(self, node: cst.Call) -> Translation:
        new = table.member_target(K2_SCALE, table.KERAS3)
        fix: dict | None = self._rename(node)
        note = None
        unscales = self._unscales_of(node)
        if any(self._unscale_fix(u, {})[0] is None for u in unscales):
            # Half a migration helps nobody: the rename waits for the unscale, which needs a hand edit.
            fix, note = None, "unscale_by_hand"
        elif unscales:
            fix, note = None, "unscale_fixed_too"
        return Translation(node, "scaled_loss", fix, None, f"Use `{new}`", note, {"new": new})

    def _unscale(self, node: cst.Call) -> Translation:
        assert table.member_target(K2_UNSCALE, table.KERAS3) == table.REMOVE_CALL
        note = None
        fix, safety, variant, fields = self._unscale_fix(node, self._drop(node))
        description = "Drop the unscale call"
        scale = self._scale_of(node)
        if scale is not None and fix is not None:
            # Paired edits are one fix with one safety (issue 20): the rename of the scale and the
            # drop of the unscale only run together, so neither half is ever written alone.
            if any(self._unscale_fix(u, {})[0] is None for u in self._unscales_of(scale)):
                fix, safety, note = None, FixSafety.NONE, "other_unscale_by_hand"
            else:
                fix = {**fix, **self._rename(scale)}
                description = "Use `scale_loss` and drop the unscale call"
        return Translation(node, variant, fix, safety, description, note, fields)

    @staticmethod
    def _rename(scale: cst.Call) -> dict:
        assert isinstance(scale.func, cst.Attribute)
        new = table.member_target(K2_SCALE, table.KERAS3)
        return {scale.func.attr: scale.func.attr.with_changes(value=new)}

    def _drop(self, unscale: cst.Call) -> dict:
        """The change that drops ``unscale``: its whole statement when it unscales in place
        (``g = opt.get_unscaled_gradients(g)``)."""
        if self._in_place is None:
            self._in_place = {}
            for line in find_all(self.context.module, cst.SimpleStatementLine):
                assign = line.body[0] if len(line.body) == 1 else None
                if (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.value, cst.Call)
                        and method_call(assign.value, K2_UNSCALE)):
                    target = dotted_name(assign.targets[0].target)
                    if target is not None and target == dotted_name(assign.value.args[0].value):
                        self._in_place[assign.value] = line
        if unscale in self._in_place:
            return {self._in_place[unscale]: cst.RemoveFromParent()}
        return {unscale: _unwrapped(unscale.args[0].value)}

    def _unscales_of(self, scale: cst.Call) -> list[cst.Call]:
        """The ``get_unscaled_gradients`` calls that pair with this scaled loss: on the path of its
        gradients to an update, or, where no update is in sight (the step returns the gradients),
        by the same optimizer in the same training step."""
        analysis = training_steps(self.context)
        found = {id(e.node): e.node for f in analysis.flows + analysis.cross_flows
                 if f.scale is not None and f.scale.call is scale
                 for e in f.path.events if e.kind == UNSCALE and isinstance(e.node, cst.Call)
                 and method_call(e.node, K2_UNSCALE)}
        calls = analysis.scale_calls
        mine = next((c for c in calls if c.call is scale), None)
        if mine is not None and mine.scope is not None:
            found.update({id(c.call): c.call for c in calls if c.scope is mine.scope and c.method == UNSCALE_METHOD
                          and c.optimizer == mine.optimizer and method_call(c.call, K2_UNSCALE)})
        return list(found.values())

    def _scale_of(self, unscale: cst.Call) -> cst.Call | None:
        """The ``get_scaled_loss`` this unscale pairs with (its fix drops this call)."""
        for call in training_steps(self.context).scale_calls:
            if (call.method == K2_SCALE and method_call(call.call, K2_SCALE)
                    and any(u is unscale for u in self._unscales_of(call.call))):
                return call.call
        return None

    def _unscale_fix(self, node: cst.Call, drop: dict) -> tuple[dict | None, FixSafety, str, dict[str, str]]:
        """Dropping the unscale keeps the loop right only where the LossScaleOptimizer that unscaled is
        what applies the gradients and nothing size-dependent happens to them in between: the fix, its
        safety, and the message (template name and fields) that says so."""
        analysis = training_steps(self.context)
        through = [(flow, i) for flow in analysis.flows + analysis.cross_flows for i, e in enumerate(flow.path.events)
                   if e.kind == UNSCALE and e.node is node]
        if not through:
            return drop, FixSafety.UNSAFE, "unscale_unseen", {}
        owner = dotted_name(node.func.value)
        blockers = []
        for flow, index in through:
            if flow.optimizer != owner:
                return None, FixSafety.NONE, "unscale_other_optimizer", {"optimizer": flow.optimizer, "owner": owner}
            blockers += [e for e in flow.path.events[index + 1:] if e.sensitive and e not in blockers]
        if not blockers:
            return drop, FixSafety.SAFE, "unscale", {}
        flow = through[0][0]
        build = flow.build
        inner = analysis.inner_build(build) if build is not None and build.is_lso else None
        moved = move_clip_changes(self.context, analysis, [f for f, _ in through], blockers, inner)
        what = describe(blockers[0])
        if moved is None:
            return None, FixSafety.NONE, "unscale_clip_stays", {"transform": what}
        changes, new_inner = moved
        return {**drop, **changes, inner: new_inner}, FixSafety.UNSAFE, "unscale_clip_moves", {"transform": what}

    # -- Keras 2 runs: Keras 3 calls ----------------------------------------------------
    def of_keras3_calls(self) -> list[Translation]:
        """Each ``scale_loss`` of a training step (from the gradient-path model), translated."""
        if self.custom(K3_SCALE):
            return []
        analysis = training_steps(self.context)
        found = []
        for scale in analysis.scale_calls:
            if scale.method != K3_SCALE or not method_call(scale.call, K3_SCALE) or scale.scope is None:
                continue
            scope = scale.scope
            gradients = [g.call for s, g in analysis.gradients if s is scope and g.kind == "tape"]
            scaled_name = next((dotted_name(target) for target, value in assigned_targets(scale.statement.node)
                                if value is scale.call), None)
            unscales = any(s.method == UNSCALE_METHOD for s in analysis.scale_calls if s.scope is scope)
            build = analysis.build_of(scope, scale.optimizer)
            found.append(_keras3_scaling(scale.call, gradients, scaled_name, unscales, build is not None and build.is_lso))
        return found


def _keras3_scaling(call: cst.Call, gradients: list[cst.Call], scaled_name: str | None, unscales: bool,
                    lso: bool) -> Translation:
    assert isinstance(call.func, cst.Attribute)
    receiver = call.func.value
    renamed_func = call.func.with_changes(attr=call.func.attr.with_changes(value=K2_SCALE))
    safety = FixSafety.SAFE if lso else FixSafety.UNSAFE
    changes: dict[cst.CSTNode, cst.CSTNode] = {}
    for gradient in gradients:
        first = gradient.args[0].value
        direct = first is call
        by_name = scaled_name is not None and dotted_name(first) == scaled_name
        if not (direct or by_name):
            continue
        new_gradient = gradient
        if direct:
            new_gradient = gradient.with_changes(args=[
                gradient.args[0].with_changes(value=call.with_changes(func=renamed_func)), *gradient.args[1:]])
        changes[gradient] = cst.Call(
            func=cst.Attribute(value=receiver, attr=cst.Name(K2_UNSCALE)),
            args=[cst.Arg(new_gradient)])
    if unscales:
        changes = {}  # the loop already unscales somewhere: rename only
    elif not changes:
        return Translation(call, "keras3_scaling", note="no_gradient")
    if not any(call is g.args[0].value for g in gradients if g in changes):
        changes[call.func] = renamed_func
    return Translation(call, "keras3_scaling", changes, safety, "Use `get_scaled_loss` and `get_unscaled_gradients`")
