"""MP101's query: the training steps whose optimizer has no loss scaling, and the fix for each.

The rule (``optimizer_not_wrapped.py``) only reports what these functions find; no rule lives here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from mpfix.codemods._gradient_fixes import describe, move_clip_changes
from mpfix.codemods._loss_scaling_support import foreign_api, scaling_changes, wrap_changes
from mpfix.codemods.analysis.gradient_path import Analysis, Flow, assigned_targets, training_steps
from mpfix.codemods.names import dotted_name


@dataclass
class Unscaled:
    """The steps that update one bare optimizer (built by ``flows[0].build``) without scaling the loss."""

    flows: list[Flow]
    fix: dict | None = None  # wrap the optimizer, scale the loss in every step; None: no fix
    imports: tuple[str, ...] = ()
    clip_stays: str | None = None  # a transform of the gradients the fix cannot move after unscaling
    first: Flow = field(init=False)

    def __post_init__(self) -> None:
        self.first = self.flows[0]


def _unscaled_flows(flows: list[Flow]) -> tuple[list[Flow], list[list[Flow]]]:
    """Flows of optimizers built where mpfix cannot see (one per update), and the others grouped by build."""
    groups: dict[int, list[Flow]] = {}
    unknown: list[Flow] = []
    unknown_seen: set[int] = set()
    for flow in flows:
        if flow.scale is not None or flow.wrapped is True:
            continue
        if flow.build is not None and flow.build.is_v1:
            continue  # a TF1 optimizer: MP112
        if flow.wrapped is None:
            if id(flow.apply.call) not in unknown_seen:
                unknown_seen.add(id(flow.apply.call))
                unknown.append(flow)
            continue
        groups.setdefault(id(flow.build.call), []).append(flow)
    return unknown, list(groups.values())


def unseen_builds(flows: list[Flow]) -> list[Flow]:
    """Updates of an optimizer built where mpfix cannot see, one per update."""
    return _unscaled_flows(flows)[0]


def unscaled(context, analysis: Analysis, flows: list[Flow]) -> list[Unscaled]:
    """Each bare optimizer built in this file whose steps never scale the loss, with its fix."""
    found = []
    for group in _unscaled_flows(flows)[1]:
        first = group[0]
        # Keras 3: scaling the loss makes every transform between the gradient and the update act on
        # scaled gradients (the LSO unscales inside apply); a constant clip moves into the optimizer.
        transforms = [e for f in group for e in f.path.events if e.sensitive] if context.keras == 3 else []
        inner = None
        moved_changes: dict = {}
        if transforms:
            moved = move_clip_changes(context, analysis, group, transforms, first.build.call)
            if moved is None:
                found.append(Unscaled(group, clip_stays=describe(transforms[0])))
                continue
            moved_changes, inner = moved
        changes, imports = wrap_changes(context, first.build, inner)
        fix: dict | None = {**changes, **moved_changes}
        for flow in group:
            step = scaling_changes(context, analysis, flow)
            if step is None or any(k in fix for k in step):
                fix = None
                break
            fix.update(step)
        found.append(Unscaled(group, fix=fix, imports=imports))
    return found


def kept_by_object(context, analysis: Analysis, flows: list[Flow]) -> list[tuple[Flow, str]]:
    """Updates of gradients another function took and an object kept (an accumulator class's ``apply``
    of what ``add`` summed), with the function that took them: the scaling goes there."""
    found = []
    seen: set[int] = set()
    local = {id(f.gradient.call) for f in flows}
    for flow in analysis.cross_flows:
        if flow.user_managed or foreign_api(context, flow) or flow.scale is not None \
                or flow.wrapped is not False or (flow.build is not None and flow.build.is_v1):
            continue
        if id(flow.apply.call) in seen or id(flow.gradient.call) in local:
            continue  # one finding per update; a gradient updated in its own function is reported there
        seen.add(id(flow.apply.call))
        taken = next((s.name for s, g in analysis.gradients if g is flow.gradient), "another function")
        found.append((flow, taken))
    return found


def built_by(context, flow: Flow) -> str | None:
    """The call that binds the optimizer in the step's own function or the module, if any."""
    analysis = training_steps(context)
    for scope in (flow.scope, *analysis.enclosing(flow.scope), analysis.scopes[0]):
        for st in reversed(scope.statements):
            for target, value in assigned_targets(st.node):
                if dotted_name(target) == flow.optimizer and isinstance(value, cst.Call):
                    return context.code(value.func) + "(...)"
    return None
