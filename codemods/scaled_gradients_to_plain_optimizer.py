"""MP111 scaled-gradients-to-plain-optimizer: gradients of a scaled loss applied by an optimizer that does not unscale."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._loss_scaling_support import STEP_TRIGGERS, foreign_api, step_flows
from mpfix.codemods.analysis.gradient_path import SCALED, UNSCALED, EventKind, OptimizerKind
from mpfix.codemods.base import Fact, Invalid, Need, Rule, Valid
from mpfix.findings import FixSafety


class ScaledGradientsToPlainOptimizer(Rule):
    code = "MP111"
    name = "scaled-gradients-to-plain-optimizer"
    uses = frozenset({Fact.GRADIENT_PATH})
    needs = frozenset({Need.GRADIENT_UPDATE})  # an apply_gradients/apply call: every flow's update (the parse gate)
    message = ("Gradients of a loss scaled by one optimizer are applied, still scaled, by another that does "
               "not unscale them; every such update is multiplied by the loss scale")
    messages = {"plain": "Gradients of `{scaler}.{method}(...)` reach `{optimizer}`, which does not unscale them: its "
                         "updates are multiplied by `{scaler}`'s loss scale",
                "inner": "Gradients unscaled by `{scaler}` are applied through `{optimizer}`, the optimizer it wraps: "
                         "that skips the LossScaleOptimizer's check for inf/NaN gradients and its dynamic scale never "
                         "drops, so an overflowing step writes NaN into the weights; apply them with "
                         "`{scaler}.apply_gradients`"}
    fix_safety = FixSafety.UNSAFE
    fix_applicabilities = (FixSafety.UNSAFE, FixSafety.DISPLAY_ONLY)
    triggers = STEP_TRIGGERS
    also_requires = ("scale",)
    explanation = """
        ## What it does
        Finds gradients of `a.scale_loss(loss)` (Keras 3) or `a.get_scaled_loss(loss)` (Keras 2)
        that reach `b.apply_gradients` of another optimizer `b` without being unscaled: on Keras 3
        where `b` is built in the file as a plain optimizer (no LossScaleOptimizer, no
        `loss_scale_factor`), on Keras 2 wherever no `get_unscaled_gradients` comes first. Typical
        when a model's gradients are split between two optimizers (a body and a head, an embedding
        optimizer) and only one of them was wrapped.

        ## Why is this bad?
        Only a LossScaleOptimizer divides by its own scale, and only in its own `apply_gradients`.
        The second optimizer applies the gradients 32768 times too large: with SGD the weights it
        updates diverge at once; Adam hides most of it (it normalises the step), so the bug often
        goes unnoticed.

        ## Example
        ```python
        grads = tape.gradient(opt.scale_loss(loss), body_vars + head_vars)
        opt.apply_gradients(zip(grads[:n], body_vars))
        head_opt.apply_gradients(zip(grads[n:], head_vars))  # head_opt = keras.optimizers.SGD(...)
        ```

        ## Use instead
        Unscale the second optimizer's share yourself, or take its gradients of the unscaled loss
        with a second tape call. Keras 3:
        ```python
        scale = opt.dynamic_scale  # read before opt.apply_gradients updates it
        opt.apply_gradients(zip(grads[:n], body_vars))
        head_opt.apply_gradients(zip([g / scale for g in grads[n:]], head_vars))
        ```

        Keras 2 also: gradients unscaled by a LossScaleOptimizer but applied through the optimizer
        it wraps (`base = Adam(); opt = LossScaleOptimizer(base); base.apply_gradients(...)`). Only
        the LossScaleOptimizer's `apply_gradients` skips a step whose gradients are inf/NaN and lowers
        its dynamic scale; the inner optimizer writes NaN into the weights at the first overflow and
        the scale never drops. `opt.inner_optimizer` is that wrapped optimizer on both generations:
        Keras 3 `opt.inner_optimizer.apply_gradients` of `opt.scale_loss` gradients (often
        accumulated over micro-batches in another function) steps 32768 times too far.

        ## Fix safety
        Unsafe, and only where Keras 2 gradients unscaled by a LossScaleOptimizer go through the
        optimizer it wraps: they then go through the LossScaleOptimizer (`opt.apply_gradients`),
        which skips overflowing steps. Keras 3 `opt.inner_optimizer` of `scale_loss` gradients gets
        the same edit as a display-only fix: a hand unscale on the way is not always visible, and
        then the LossScaleOptimizer would unscale a second time, so `apply` never writes it;
        `mpfix repair` tries it and keeps it only when the run proves it. Otherwise
        no automatic fix: the right unscale depends on which optimizer's scale was used and on
        when it changes.
    """
    VALID = [
        Valid("""
            import keras
            import tensorflow as tf
            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
            head_opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))
            with tf.GradientTape(persistent=True) as tape:
                loss = loss_fn(y, model(x))
                scaled = opt.scale_loss(loss)
                head_scaled = head_opt.scale_loss(loss)
            opt.apply_gradients(zip(tape.gradient(scaled, body_vars), body_vars))
            head_opt.apply_gradients(zip(tape.gradient(head_scaled, head_vars), head_vars))
        """, keras=3),
        Valid("""
            import tensorflow as tf
            import tf_keras
            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))
            head_opt = tf_keras.optimizers.SGD(0.01)
            with tf.GradientTape() as tape:
                scaled = opt.get_scaled_loss(loss_fn(y, model(x)))
            grads = opt.get_unscaled_gradients(tape.gradient(scaled, variables))
            opt.apply_gradients(zip(grads[:n], variables[:n]))
            head_opt.apply_gradients(zip(grads[n:], variables[n:]))
        """, keras=2),
    ]
    INVALID = [
        # Keras 2: unscaled by the LSO, applied through the optimizer it wraps (no inf/NaN check).
        Invalid("""
            import tensorflow as tf
            import tf_keras

            base_opt = tf_keras.optimizers.Adam(1e-3)
            opt = tf_keras.mixed_precision.LossScaleOptimizer(base_opt)


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, variables))
                base_opt.apply_gradients(zip(grads, variables))
        """, """
            import tensorflow as tf
            import tf_keras

            base_opt = tf_keras.optimizers.Adam(1e-3)
            opt = tf_keras.mixed_precision.LossScaleOptimizer(base_opt)


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, variables))
                opt.apply_gradients(zip(grads, variables))
        """, keras=2),
        Invalid("""
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
            head_opt = keras.optimizers.SGD(0.01)


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, variables)
                opt.apply_gradients(zip(grads[:n], variables[:n]))
                head_opt.apply_gradients(zip(grads[n:], variables[n:]))
        """, keras=3),
        Invalid("""
            import tensorflow as tf
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))
            head_opt = tf_keras.optimizers.SGD(0.01)


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, variables)
                body = opt.get_unscaled_gradients(grads[:n])
                opt.apply_gradients(zip(body, variables[:n]))
                head_opt.apply_gradients(zip(grads[n:], variables[n:]))
        """, keras=2),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        analysis, flows = step_flows(self.context)
        # Gradients accumulated in one function and applied in another (through shared variables) through an
        # LSO's `inner_optimizer`. Other cross-function flows are left: a conditional unscale in the applying
        # helper (`if self.amp: grads = opt.get_unscaled_gradients(grads)`, DLRM's trainer) is not on their path.
        cross = [f for f in analysis.cross_flows
                 if f.inner_of is not None and not f.user_managed and not foreign_api(self.context, f)]
        seen: set[int] = set()
        for flow in flows + cross:
            scale = flow.scale
            if self.context.keras == 2 and scale is not None and scale.optimizer != flow.optimizer \
                    and flow.path.states == {UNSCALED} and id(flow.apply.call) not in seen \
                    and any(e.kind is EventKind.UNSCALE and e.optimizer == scale.optimizer for e in flow.path.events):
                wrapper = analysis.build_of(scale.scope or flow.scope, scale.optimizer)
                if wrapper is not None and wrapper.is_lso and (flow.inner_of is wrapper or flow.build is not None
                                                               and analysis.inner_build(wrapper) is flow.build.call):
                    seen.add(id(flow.apply.call))
                    receiver = flow.apply.call.func.value
                    self.report(flow.apply.call, "inner", scaler=scale.optimizer, optimizer=flow.optimizer,
                                fix={receiver: cst.parse_expression(scale.optimizer)},
                                description="Apply through the LossScaleOptimizer")
                continue
            if scale is None or SCALED not in flow.path.states or scale.optimizer == flow.optimizer:
                continue
            if id(flow.apply.call) in seen:
                continue
            if self.context.keras == 3:
                # Another LSO, or one mpfix cannot see, may unscale; a plain Keras 3 scaler does not scale.
                scaler = next((f for f in flows if f.optimizer == scale.optimizer and f.scope is flow.scope), None)
                if flow.kind is not OptimizerKind.PLAIN or (scaler is not None and scaler.kind is OptimizerKind.PLAIN):
                    continue
            elif flow.build is not None and flow.build.is_lso:
                continue  # Keras 2: another LSO (a separate mistake, rarely deliberate); MP103 for the same one
            seen.add(id(flow.apply.call))
            # Keras 3 `lso.inner_optimizer.apply_gradients` of `lso.scale_loss` gradients: the LSO's own apply
            # unscales them and skips non-finite steps, unless a hand unscale on the way that the path cannot see
            # (a helper, `/ initial_scale`, `/ 32768.0`) already did, when it unscales twice (turn 11: measure ran 7
            # such spellings; the fixed copies stalled flat). So the fix is display-only: `apply` never writes it,
            # `mpfix repair` keeps it only when a run proves it.
            if flow.inner_of is not None and flow.path.states == {SCALED} \
                    and analysis.build_of(scale.scope or flow.scope, scale.optimizer) is flow.inner_of:
                self.report(flow.apply.call, "plain", scaler=scale.optimizer, method=scale.method,
                            optimizer=flow.optimizer, fix={flow.apply.call.func.value: cst.parse_expression(scale.optimizer)},
                            safety=FixSafety.DISPLAY_ONLY, description="Apply through the LossScaleOptimizer")
            else:
                self.report(flow.apply.call, "plain", scaler=scale.optimizer, method=scale.method,
                            optimizer=flow.optimizer)
