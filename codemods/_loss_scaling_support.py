"""Shared pieces of the loss-scaling rules (MP1xx): the scaling and wrapping fixes, written for the Keras
generation that runs. No rules live here.

Under ``mixed_float16`` a custom ``GradientTape`` loop without loss scaling
loses most of its gradients: float16's smallest subnormal is ~6e-8, so
typical per-weight gradients (1e-8..1e-6) round to exactly zero (~95% of them
in a small MLP, measured on CPU). ``compile``/``fit`` scale by themselves;
custom loops must do it by hand, and the two Keras generations spell it
differently (see KERAS_API.md):

* Keras 3: ``scaled_loss = optimizer.scale_loss(loss)`` inside the tape, the
  gradient of ``scaled_loss``; ``apply_gradients`` unscales by itself.
* Keras 2: ``optimizer.get_scaled_loss(loss)`` inside the tape and
  ``optimizer.get_unscaled_gradients(grads)`` before ``apply_gradients``, which
  does NOT unscale (forgetting it multiplies each update by 32768).

Keras 2 calls on Keras 3 (``get_scaled_loss``) belong to MP303, LSO constructor
arguments to MP302: the rules here stay silent on those.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import libcst as cst

from mpfix.codemods.analysis.gradient_path import (
    SCALE_METHODS,
    UNSCALE_METHOD,
    Analysis,
    Flow,
    OptimizerBuild,
    Statement,
    assigned_targets,
    assigns_name,
    contains,
    in_tape,
    names_in,
    training_steps,
)
from mpfix.codemods.names import dotted_name

STEP_TRIGGERS = ("GradientTape", "gradients(")
K3_SCALE = "scale_loss"
K2_SCALE = "get_scaled_loss"


# --------------------------------------------------------------------------- shared fix helpers
def scale_method(keras: int) -> str:
    return K3_SCALE if keras == 3 else K2_SCALE


def foreign_api(context, flow: Flow) -> bool:
    """The step already uses the other generation's scaling API: MP303's business, not ours."""
    foreign = (K2_SCALE, UNSCALE_METHOD) if context.keras == 3 else (K3_SCALE,)
    return any(s.method in foreign for s in training_steps(context).scale_calls
               if same_scope(s.statement, flow))


def same_scope(statement: Statement, flow: Flow) -> bool:
    return any(st is statement for st in flow.scope.statements)


def statement_index(flow: Flow) -> dict[int, int]:
    return {id(st.node): i for i, st in enumerate(flow.scope.statements)}


def statement_of(flow: Flow, node: cst.CSTNode) -> Statement | None:
    return next((st for st in flow.scope.statements if st.node is node), None)


def loss_anchor(analysis: Analysis, flow: Flow, loss: str) -> cst.BaseStatement | None:
    """The statement after which the scaled loss is computed: the last one that finishes ``loss``.

    With a tape: a top-level statement of the tape's block, so the scaling is recorded and
    runs on every path. With ``tf.gradients`` (graph code): the last assignment before.
    """
    order = statement_index(flow)
    grad_at = order[id(flow.gradient.statement.node)]
    tape = analysis.tape_of(flow)
    if tape is None:
        best = None
        for st in flow.scope.statements[:grad_at]:
            if isinstance(st.node, cst.SimpleStatementLine) and assigns_name(st.node, loss):
                best = st.node
        return best
    best = None
    for with_node in tape.withs:
        if order.get(id(with_node), grad_at + 1) > grad_at or not isinstance(with_node.body, cst.IndentedBlock):
            continue
        for stmt in with_node.body.body:
            if order.get(id(stmt), grad_at) < grad_at and assigns_name(stmt, loss) \
                    and not contains(stmt, flow.gradient.call):
                best = stmt
    return best


def computed_scaled_loss(analysis: Analysis, flow: Flow) -> str | None:
    """The name the step already binds to ``optimizer.scale_loss(loss)`` of the gradient's own target, in
    the tape after the loss is finished and not rebound before the gradient: the gradient should be
    taken of it (``scaled_loss = opt.scale_loss(loss)`` then ``tape.gradient(loss, ...)``)."""
    target = flow.gradient.target
    if not isinstance(target, cst.Name):
        return None
    anchor = loss_anchor(analysis, flow, target.value)
    order = statement_index(flow)
    grad_at = order[id(flow.gradient.statement.node)]
    after = order.get(id(anchor), -1) if anchor is not None else -1
    for scale in analysis.scale_calls:
        args = scale.call.args
        if scale.scope is not flow.scope or scale.optimizer != flow.optimizer or scale.method not in SCALE_METHODS \
                or scale.conditional or len(args) != 1 or not isinstance(args[0].value, cst.Name) \
                or args[0].value.value != target.value:
            continue
        at = order.get(id(scale.statement.node))
        if at is None or not after < at < grad_at or not in_tape(analysis, flow, scale.statement):
            continue
        for bound, value in assigned_targets(scale.statement.node):
            if value is scale.call and isinstance(bound, cst.Name) and not any(
                    assigns_name(st.node, bound.value) for st in flow.scope.statements[at + 1:grad_at]
                    if isinstance(st.node, cst.SimpleStatementLine)):
                return bound.value
    return None


def fresh_name(flow: Flow, base: str) -> str:
    """``unused_name`` in the step's own function."""
    return unused_name(flow.scope, base)


def unused_name(scope, base: str) -> str:
    """``base`` (else ``base_2``, ...): a name the scope neither binds nor reads, so a global it reads never becomes a
    local of the fix."""
    used = names_in(scope.node)
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{base}_{n}"
    return name


def new_statement(context, code: str) -> cst.BaseStatement:
    module = context.module
    return cst.parse_statement(code + module.default_newline, config=module.config_for_parsing)


_LEGACY = ".optimizers.legacy."


class Shape(enum.Enum):
    """Training-step shapes whose loss scaling mpfix cannot write right (issue 20 class 5)."""

    SECOND_ORDER = "second-order"
    LEGACY_OPTIMIZER = "legacy-optimizer"
    SPLIT_BETWEEN_OPTIMIZERS = "split"


@dataclass(frozen=True)
class Unfixable:
    shape: Shape
    why: str


def unfixable_shape(context, analysis: Analysis, flow: Flow) -> Unfixable | None:
    """Why scaling this flow's loss cannot be written right (issue 20 class 5), or None.

    * second order (nested tapes): the loss holds gradients of an inner tape, which one scale
      outside cannot make right (and scaling a list of gradients is no loss scaling at all);
    * a legacy optimizer (``optimizers.legacy.*``, Keras 2 only) in a Keras 3 file: its
      LossScaleOptimizer has ``get_scaled_loss``, not Keras 3's ``scale_loss``;
    * on Keras 3, the gradients of one loss split between optimizers: each LossScaleOptimizer
      divides by its own scale, so one loss scaled by one of them is wrong for the others.
    """
    if analysis.second_order(flow):
        return Unfixable(Shape.SECOND_ORDER, "it is a second-order gradient (a tape inside its tape): scale each "
                                             "tape's loss by hand")
    if context.keras == 3:
        builds = [flow.build] if flow.build is not None else []
        inner = analysis.inner_build(flow.build) if flow.build is not None and flow.build.is_lso else None
        names = [b.qualified for b in builds] + ([context.resolve(inner.func) or ""] if inner is not None else [])
        if any(_LEGACY in (name or "") for name in names):
            return Unfixable(Shape.LEGACY_OPTIMIZER, f"`{flow.optimizer}` is a legacy (Keras 2) optimizer: its "
                             "LossScaleOptimizer has `get_scaled_loss`/`get_unscaled_gradients`, not `scale_loss`")
        others = {f.optimizer for f in analysis.flows if f.gradient is flow.gradient} - {flow.optimizer}
        if others:
            return Unfixable(Shape.SPLIT_BETWEEN_OPTIMIZERS,
                             f"the gradients also update {', '.join(f'`{o}`' for o in sorted(others))}: each "
                             "LossScaleOptimizer unscales by its own scale, so scale a loss per optimizer")
    return None


def scaling_changes(context, analysis: Analysis, flow: Flow, *, guard: bool = False) -> dict | None:
    """Edits that scale the flow's loss inside its tape (and unscale its gradients on Keras 2).

    ``guard`` (Keras 2, an optimizer that may be plain): scale and unscale only under
    ``isinstance(optimizer, LossScaleOptimizer)``; None where that cannot be written plainly,
    or where no scaling is right (``unfixable_shape``).
    """
    if unfixable_shape(context, analysis, flow) is not None:
        return None
    grad = flow.gradient
    target = grad.target
    if not isinstance(target, cst.Name):
        return None
    anchor = loss_anchor(analysis, flow, target.value)
    if anchor is None or contains(anchor, grad.call):
        return None
    base = target.value
    computed = None if guard else computed_scaled_loss(analysis, flow)
    scaled = computed or fresh_name(flow, base + "_scaled" if base.startswith("scaled") else "scaled_" + base)
    new_call = grad.call.with_changes(args=[grad.call.args[0].with_changes(value=cst.Name(scaled)), *grad.call.args[1:]])
    if computed is not None:
        # The step already scales this loss in the tape: differentiate that value, scale nothing twice.
        return {grad.call: unscale_call(flow.optimizer, new_call) if context.keras == 2 and not flow.unscaled
                else new_call}
    if guard and context.keras == 2:
        return guarded_scaling_changes(context, flow, anchor, scaled, new_call)
    stmt = new_statement(context, f"{scaled} = {flow.optimizer}.{scale_method(context.keras)}({target.value})")
    if context.keras == 2 and not flow.unscaled:
        new_call = unscale_call(flow.optimizer, new_call)
    return {anchor: cst.FlattenSentinel([anchor, stmt]), grad.call: new_call}


def needs_lso_guard(context, flow: Flow) -> bool:
    """Keras 2: the optimizer may be a plain one, which has no ``get_scaled_loss``/``get_unscaled_gradients``.

    Known to be an LSO only where the file builds it as one, or where the step already calls
    ``get_unscaled_gradients`` on it unguarded. A compiled model's optimizer (``self.optimizer`` in
    a ``train_step``) is an LSO only if ``compile`` ran under ``mixed_float16``: a library's own
    float32 runs get a plain one.
    """
    return context.keras == 2 and not (flow.unscaled or (flow.build is not None and flow.build.is_lso))


def gradient_assignment(flow: Flow) -> tuple[cst.SimpleStatementLine, str] | None:
    """``(statement, name)`` where the gradient call is the whole value of ``name = <call>``."""
    node = flow.gradient.statement.node
    if not isinstance(node, cst.SimpleStatementLine) or len(node.body) != 1:
        return None
    small = node.body[0]
    if not isinstance(small, cst.Assign) or len(small.targets) != 1 or small.value is not flow.gradient.call:
        return None
    name = small.targets[0].target
    return (node, name.value) if isinstance(name, cst.Name) else None


def guarded_scaling_changes(context, flow: Flow, anchor: cst.BaseStatement, scaled: str,
                            new_call: cst.Call) -> dict | None:
    """Keras 2, the mixed-precision guide's form for an optimizer that may be plain: scale and unscale
    only ``if isinstance(optimizer, LossScaleOptimizer)``. None where the gradient is not assigned to a name."""
    assigned = gradient_assignment(flow)
    if assigned is None:
        return None
    grad_statement, grads = assigned
    lso, _ = lso_class_spelling(context)
    if lso is None:
        return None
    opt, loss = flow.optimizer, flow.gradient.target.value
    guard = f"isinstance({opt}, {lso})"
    scale = new_statement(context, f"{scaled} = {opt}.{K2_SCALE}({loss}) if {guard} else {loss}")
    unscale = new_statement(context, f"if {guard}:{context.module.default_newline}"
                                     f"{context.module.default_indent}{grads} = {opt}.{UNSCALE_METHOD}({grads})")
    new_grad_statement = grad_statement.with_deep_changes(grad_statement.body[0], value=new_call)
    return {anchor: cst.FlattenSentinel([anchor, scale]),
            grad_statement: cst.FlattenSentinel([new_grad_statement, unscale])}


def lso_class_spelling(context) -> tuple[str | None, tuple[str, ...]]:
    """The file's own spelling of LossScaleOptimizer, preferring the Keras family it imports; None if it
    cannot name it without a new import (a fix that adds an import for a guard is left to the user)."""
    imports = context.imports
    families = ("tf_keras",) if imports.imports_module("tf_keras") else ("tensorflow.keras", "keras", "tf_keras")
    for family in families:
        local = imports.local_name_for(f"{family}.mixed_precision.LossScaleOptimizer")
        if local is not None:
            return local, ()
    return None, ()


def unscale_call(optimizer: str, call: cst.Call) -> cst.Call:
    return cst.Call(func=cst.Attribute(value=cst.parse_expression(optimizer), attr=cst.Name(UNSCALE_METHOD)),
                    args=[cst.Arg(call)])


def lso_spelling(context, build_call: cst.Call) -> tuple[str, tuple[str, ...]]:
    """How this file spells LossScaleOptimizer, in the family of Keras it already uses."""
    imports = context.imports
    dotted = dotted_name(build_call.func) or ""
    raw = imports.aliases.get(dotted.split(".")[0], "")
    if imports.imports_module("tf_keras") or raw.startswith("tf_keras"):
        families = ("tf_keras",)
    elif raw == "keras" or raw.startswith("keras."):
        families = ("keras", "tensorflow.keras")
    else:
        families = ("tensorflow.keras", "keras")
    for family in families:
        local = imports.local_name_for(f"{family}.mixed_precision.LossScaleOptimizer")
        if local is not None:
            return local, ()
    if families[0] == "tf_keras":
        return "tf_keras.mixed_precision.LossScaleOptimizer", ("import tf_keras",)
    if families[0] == "keras":
        return "keras.mixed_precision.LossScaleOptimizer", ("import keras",)
    return "tf.keras.mixed_precision.LossScaleOptimizer", ("import tensorflow as tf",)


def number(value: float) -> str:
    return repr(float(value))


def wrap_changes(context, build: OptimizerBuild, inner: cst.Call | None = None) -> tuple[dict, tuple[str, ...]]:
    """Turn loss scaling on where the optimizer is built, in the target generation's form.

    ``inner``: the constructor call as it should be inside the wrapper (e.g. with a clip moved in).
    """
    original = call = build.call
    if inner is not None:
        call = inner
    fixed = context.loss_scale
    if fixed is not None and context.keras == 3:
        # Keras 3 refuses LSO(dynamic=False); a fixed scale is the optimizer's loss_scale_factor.
        args = list(call.args)
        if args:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) \
                if args[-1].comma is cst.MaybeSentinel.DEFAULT else args[-1]
        args.append(cst.Arg(keyword=cst.Name("loss_scale_factor"), value=cst.Float(number(fixed)),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        return {original: call.with_changes(args=args)}, ()
    spelled, imports = lso_spelling(context, original)
    args = [cst.Arg(call)]
    if fixed is not None:
        args = [cst.Arg(call, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Arg(keyword=cst.Name("dynamic"), value=cst.Name("False"),
                        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                        comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Arg(keyword=cst.Name("initial_scale"), value=cst.Float(number(fixed)),
                        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))]
    return {original: cst.Call(func=cst.parse_expression(spelled), args=args)}, imports


def step_flows(context) -> tuple[Analysis, list[Flow]]:
    analysis = training_steps(context)
    return analysis, [f for f in analysis.flows if not f.user_managed and not foreign_api(context, f)]


def where(flow: Flow) -> str:
    return "the module-level loop" if flow.scope.name == "<module>" else f"`{flow.scope.name}`"
