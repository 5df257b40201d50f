"""MP109 transform-of-scaled-gradients: clipping or noise applied to gradients that still carry the loss scale."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._gradient_fixes import describe, move_clip_changes, move_unscale_changes, rescale_around_changes
from mpfix.codemods._loss_scaling_support import STEP_TRIGGERS, K3_SCALE, foreign_api
from mpfix.codemods.analysis.gradient_path import SCALED, THRESHOLD, UNSCALE, Flow, OptimizerKind, training_steps
from mpfix.codemods.base import Fact, Invalid, Need, Rule, Valid
from mpfix.findings import FixSafety


class TransformOfScaledGradients(Rule):
    code = "MP109"
    name = "transform-of-scaled-gradients"
    uses = frozenset({Fact.GRADIENT_PATH})
    needs = frozenset({Need.GRADIENT_UPDATE})  # an apply_gradients/apply call: every flow's update (the parse gate)
    message = ("Gradients are clipped (or get noise) while they still carry the loss scale; "
               "transform them after unscaling")
    messages = {
        "before_unscale": ("{transform} acts on gradients that still carry the loss scale: "
                           "`{optimizer}.get_unscaled_gradients` comes after it; unscale first"),
        "keras3_scaled": ("{transform} acts on scaled gradients: Keras 3's LossScaleOptimizer unscales only inside "
                          "`apply_gradients`; clip with the inner optimizer's `global_clipnorm`/`clipnorm`/`clipvalue`"),
        "keras3_threshold": ("{transform} decides the update on scaled gradients (x the loss scale, 32768 at first) "
                             "against a fixed threshold: divide the tested value by `{optimizer}.dynamic_scale` (or "
                             "scale the threshold); Keras 3's LossScaleOptimizer unscales only inside `apply_gradients`"),
        "keras3_helper": ("{transform} acts on scaled gradients: Keras 3's LossScaleOptimizer unscales only inside "
                          "`apply`; give it the gradients divided by `{optimizer}.scale_loss(1.0)` and multiply its "
                          "result back for `apply`"),
    }
    notes = {"by_hand": "mpfix moves only a constant clip into an optimizer built in this file: move it by hand"}
    fix_safety = FixSafety.UNSAFE
    triggers = STEP_TRIGGERS
    also_requires = ("scale",)
    explanation = """
        ## What it does
        Finds size-dependent transforms (`tf.clip_by_global_norm`, `tf.clip_by_norm`,
        `tf.clip_by_value`, a clip factor by hand `tf.minimum(1.0, C / norm)`, added noise, or a
        same-file helper doing one of them or dividing the gradients by their own norm) applied to
        gradients of a scaled loss (`tape.gradient`,
        or per-example `tape.jacobian`) before they are unscaled: on Keras 2 before
        `get_unscaled_gradients`, on Keras 3 before `apply_gradients` of the LossScaleOptimizer
        (which unscales inside `apply`). On Keras 3 also an update taken only under a test of the
        scaled gradients' size against a fixed threshold (`if tf.linalg.global_norm(grads) < 50:`, a
        loss-spike guard), reported without a fix.

        ## Why is this bad?
        The gradients are 32768 times too large at that point (the dynamic loss scale, which also
        changes during training). A clip threshold of 1.0 acts as 1/32768 on the real gradients, so
        every update comes out thousands of times too small; noise is divided by the scale; a
        gradient divided by its own norm loses the scale, which the optimizer then divides out
        again (Keras 3, SGD: loss flat at 11.1 where float32 fell to 0.34 in 80 steps). SGD
        then barely trains (10-20x worse final loss in a few hundred steps); Adam hides part of it.
        A threshold test on the scaled norm skips every step (TF 2.21, Keras 3, a guard at 50:
        the scaled norm was ~1.7e5, the loss stayed flat for 4 epochs).

        ## Example
        ```python
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Use instead
        Keras 3: let the inner optimizer clip; it does so after the LossScaleOptimizer unscaled.
        ```python
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, global_clipnorm=1.0))
        ...
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```
        Keras 2: unscale first, then clip.
        ```python
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Fix safety
        Unsafe (it changes the update, to what was meant). Keras 2: the unscale moves to the
        gradient call. Keras 3: a constant clip moves into the inner optimizer's
        `global_clipnorm` / `clipnorm` / `clipvalue` where its construction is in the file. A transform
        that cannot move there (a same-file helper called with the gradient list, adaptive clipping,
        a clip on a computed threshold or beside an optimizer that clips already, added noise) gets
        the gradients divided by `optimizer.scale_loss(1.0)` (Keras 3 has no public unscale; that is
        the factor `apply` divides by) and its result multiplied back, so `apply` still skips
        overflowed steps and moves the dynamic scale. A helper that reads the scale or gets the
        optimizer, and a statement that reads values derived from the gradients elsewhere, are
        reported without a fix.
    """
    VALID = [
        # Keras 2: clip after the unscale.
        Valid("""
            import tensorflow as tf
            import tf_keras
            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = opt.get_scaled_loss(loss)
            grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
            grads, _ = tf.clip_by_global_norm(grads, 1.0)
            opt.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # Keras 3: the inner optimizer clips after the LSO unscaled.
        Valid("""
            import keras
            import tensorflow as tf
            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, global_clipnorm=1.0))
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = opt.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
        # Accumulating scaled micro-batch gradients is linear: the scale only changes inside apply.
        Valid("""
            import keras
            import tensorflow as tf
            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
            for x, y in micro_batches:
                with tf.GradientTape() as tape:
                    scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                for acc, g in zip(accumulators, grads):
                    acc.assign_add(g)
            opt.apply_gradients(zip(accumulators, model.trainable_variables))
        """, keras=3),
    ]
    INVALID = [
        Invalid(
            """
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = opt.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads, _ = tf.clip_by_global_norm(grads, 1.0)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9, global_clipnorm=1.0))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = opt.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
        ),
        Invalid(
            """
            import tensorflow as tf
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = opt.get_scaled_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = [tf.clip_by_norm(g, 1.0) for g in grads]
                grads = opt.get_unscaled_gradients(grads)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = opt.get_scaled_loss(loss)
                grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
                grads = [tf.clip_by_norm(g, 1.0) for g in grads]
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=2,
        ),
        # Keras 3, a same-file helper (adaptive clipping) on scaled gradients: it gets them divided by the scale
        # (what apply divides by) and its result is multiplied back, so apply still skips overflowed steps.
        Invalid(
            """
            import keras
            import tensorflow as tf
            from keras import ops


            def adaptive_clip(grads, params, clip=0.01):
                return [ops.where(ops.norm(g) > clip * ops.norm(p), g * clip * ops.norm(p) / ops.norm(g), g)
                        for g, p in zip(grads, params)]


            class AGCModel(keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        scaled_loss = self.optimizer.scale_loss(self.compute_loss(x=x, y=y, y_pred=self(x)))
                    grads = tape.gradient(scaled_loss, self.trainable_variables)
                    grads = adaptive_clip(grads, self.trainable_variables)
                    self.optimizer.apply(grads, self.trainable_variables)
                    return {}
            """,
            """
            import keras
            import tensorflow as tf
            from keras import ops


            def adaptive_clip(grads, params, clip=0.01):
                return [ops.where(ops.norm(g) > clip * ops.norm(p), g * clip * ops.norm(p) / ops.norm(g), g)
                        for g, p in zip(grads, params)]


            class AGCModel(keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        scaled_loss = self.optimizer.scale_loss(self.compute_loss(x=x, y=y, y_pred=self(x)))
                    grads = tape.gradient(scaled_loss, self.trainable_variables)
                    loss_scale = self.optimizer.scale_loss(1.0)
                    grads = [None if g is None else ops.divide(g, loss_scale) for g in grads]
                    grads = adaptive_clip(grads, self.trainable_variables)
                    grads = [None if g is None else ops.multiply(g, loss_scale) for g in grads]
                    self.optimizer.apply(grads, self.trainable_variables)
                    return {}
            """,
            keras=3,
        ),
        # Noise on scaled gradients, optimizer built elsewhere: the round trip through scale_loss(1.0) on Keras 3.
        Invalid(
            """
            import tensorflow as tf

            def train_step(opt, x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = [g + tf.random.normal(tf.shape(g), stddev=0.01) for g in grads]
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
        ),
        # A loss-spike guard on the scaled norm: every step is skipped. Reported without a fix.
        Invalid(
            """
            import tensorflow as tf

            def train_step(opt, x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                if tf.linalg.global_norm(grads) < 50.0:
                    opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        # A transform on scaled gradients is wrong whoever manages the scaling (an isinstance guard or a
        # conditional `get_scaled_loss` only decides whether there is a scale): all flows but those using
        # the other generation's API (MP303's).
        analysis = training_steps(self.context)
        flows = [f for f in analysis.flows if not foreign_api(self.context, f)]
        # Gradients an object keeps for another method (an accumulator's `step`): the same transforms
        # on the same states, reported without a fix (the clip and the scaling are in different functions).
        cross = [f for f in analysis.cross_flows if not foreign_api(self.context, f)]
        seen: set[int] = set()
        for flow in flows + cross:
            if flow.scale is None or SCALED not in flow.path.states | frozenset().union(
                    *(e.states for e in flow.path.events)):
                continue
            if self.context.keras == 2:
                self._keras2(analysis, flow, seen, flow in cross)
            else:
                self._keras3(analysis, flow, flows, seen, flow in cross)

    def _keras2(self, analysis, flow: Flow, seen: set[int], cross: bool = False) -> None:
        events = flow.path.events
        for index, unscale in enumerate(events):
            if unscale.kind != UNSCALE:
                continue
            before = [e for e in events[:index] if e.sensitive and SCALED in e.states]
            if not before or id(before[0].node) in seen:
                continue
            seen.update(id(e.node) for e in before)
            self.report(
                before[0].node,
                "before_unscale",
                transform=describe(before[0]),
                optimizer=unscale.optimizer,
                fix=None if cross else move_unscale_changes(self.context, analysis, flow, unscale),
                description="Unscale the gradients before transforming them")
            return

    def _keras3(self, analysis, flow: Flow, flows: list[Flow], seen: set[int], cross: bool = False) -> None:
        if flow.scale.method != K3_SCALE or flow.kind is OptimizerKind.PLAIN:
            return  # a plain Keras 3 optimizer's scale_loss does not scale (MP111 covers other updaters)
        # Across functions the optimizer is spelled by each scope (`self.optimizer`, a parameter): there
        # the update must be by an optimizer that scales (a traced LSO), whatever its spelling.
        if flow.scale.optimizer != flow.optimizer if not cross else flow.kind is not OptimizerKind.LSO:
            return
        events = [e for e in flow.path.sensitive_on(SCALED) if id(e.node) not in seen]
        if not events:
            return
        seen.update(id(e.node) for e in events)
        if events[0].kind == THRESHOLD:
            self.report(events[0].node, "keras3_threshold", transform=describe(events[0]), optimizer=flow.optimizer)
            return
        fix, template = None, "keras3_scaled"
        build = flow.build
        if build is not None and not cross:
            inner = analysis.inner_build(build) if build.is_lso else build.call if build.has_loss_scale_factor \
                else None
            same = [f for f in flows if f.build is not None and f.build.call is build.call]
            moved = move_clip_changes(self.context, analysis, same, events, inner)
            if moved is not None:
                changes, new_inner = moved
                fix = {**changes, inner: new_inner}
        if fix is None and not cross:
            same = [f for f in flows if f.apply.optimizer == flow.optimizer and f.scope is flow.scope]
            fix = rescale_around_changes(self.context, analysis, same, flow, events)
            template = "keras3_scaled" if fix is None else "keras3_helper"
        self.report(
            events[0].node,
            template,
            note=None if fix is not None else "by_hand",
            transform=describe(events[0]), **({"optimizer": flow.optimizer} if template == "keras3_helper" else {}),
            fix=fix, description="Clip in the inner optimizer, after unscaling" if template == "keras3_scaled"
            else "Transform the gradients unscaled, then scale them back for apply")
