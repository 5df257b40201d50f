"""Find custom training steps: where gradients are taken and where an optimizer applies them.

A training step here is a scope (a function, a method such as a ``train_step``
override, or the module's own top-level code) in which the output of
``tape.gradient(loss, vars)`` (or graph-mode ``tf.gradients(loss, vars)``)
flows into ``optimizer.apply_gradients(...)`` / ``optimizer.apply(...)``.
Each such link is a ``Flow``. The optimizer of a flow is traced back to where
it is built (``optimizer = tf.keras.optimizers.Adam()``, ``self.opt = ...``,
a same-module factory function, a module global, or one level of call-site
argument passing); ``model.optimizer`` / ``self.optimizer`` of a compiled
model count as wrapped, because ``compile`` wraps the optimizer in a
LossScaleOptimizer by itself under ``mixed_float16``.

The analysis walks statements itself (no scope or qualified-name metadata:
those cost ~10x the parse, ``docs/architecture.md``) and is computed once per file and
shared by every loss-scaling rule through ``training_steps(context)``.

What it cannot follow, and reports as "unknown" rather than guessing: an
optimizer built in another module or passed through more than one call, an
optimizer kept in a container (``self.optimizers[0]``), and losses that are
not a plain name at the gradient call.

The model is split by job: ``gradient_records`` (records, ``State``/``EventKind``/``OptimizerKind``),
``gradient_syntax`` (scopes and statement helpers), ``gradient_builder`` (the passes that build an
``Analysis``) and ``gradient_tracer`` (the gradient path through one scope). It reads the file
through ``FileView`` (the module, name resolution, source text, the Keras generation), not the
rule framework.
"""

from __future__ import annotations

from mpfix.codemods.analysis.gradient_builder import _analyse
from mpfix.codemods.analysis.gradient_records import (
    ACCUMULATE, ALL_REDUCE, CLIP_GLOBAL_NORM, CLIP_NORM, CLIP_VALUE, DIVIDED, LSO, MANUAL, MANUAL_UNSCALE, NOISE,
    SCALE_METHODS, SCALED, STRATEGY_CONSTRUCTORS, THRESHOLD, UNSCALE, UNSCALE_METHOD, UNSCALED, Analysis, EventKind, Flow, OptimizerBuild, OptimizerKind,
    FileView, GradientKind, PathEvent, State, Statement,
)
from mpfix.codemods.analysis.gradient_syntax import (
    assigned_targets, assigns_name, calls_in, contains, exclusive, names_in, target_names,
)

__all__ = [
    "ACCUMULATE", "ALL_REDUCE", "Analysis", "CLIP_GLOBAL_NORM", "CLIP_NORM", "CLIP_VALUE", "DIVIDED", "EventKind",
    "FileView", "Flow", "GradientKind", "LSO", "MANUAL", "MANUAL_UNSCALE", "NOISE", "OptimizerBuild", "OptimizerKind", "PathEvent",
    "SCALED", "SCALE_METHODS", "STRATEGY_CONSTRUCTORS", "State", "Statement", "THRESHOLD", "UNSCALE", "UNSCALED", "UNSCALE_METHOD", "assigned_targets",
    "assigns_name", "calls_in", "contains", "exclusive", "in_tape", "names_in", "target_names", "training_steps",
]


def training_steps(context: FileView) -> Analysis:
    """The training-step analysis of ``context``'s module, computed once per file."""
    analysis = context.cache.get("training_steps")
    if analysis is None:
        analysis = context.cache["training_steps"] = _analyse(context)
    return analysis


def in_tape(analysis: Analysis, flow: Flow, statement: Statement) -> bool:
    """True if ``statement`` runs while the flow's tape records (inside one of its `with` blocks)."""
    tape = analysis.tape_of(flow)
    if tape is None:
        return flow.gradient.tape is None  # tf.gradients: graph mode, nothing to record
    return any(w in statement.parents for w in tape.withs)
