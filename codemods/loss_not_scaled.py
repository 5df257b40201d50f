"""MP102 loss-not-scaled: see the rule's explanation (`mpfix explain MP102`)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._gradient_fixes import describe, move_clip_changes
from mpfix.codemods.analysis.gradient_path import Flow
from mpfix.codemods._loss_scaling_support import (
    STEP_TRIGGERS, Shape, computed_scaled_loss, foreign_api, needs_lso_guard, scale_method, scaling_changes, step_flows, unfixable_shape, where,
)
from mpfix.codemods.base import Fact, Invalid, Need, Rule, Valid
from mpfix.findings import FixSafety
from mpfix.policy import Policy


class LossNotScaled(Rule):
    code = "MP102"
    name = "loss-not-scaled"
    uses = frozenset({Fact.GRADIENT_PATH})
    needs = frozenset({Need.GRADIENT_UPDATE})  # an apply_gradients/apply call: every flow's update (the parse gate)
    message = "The optimizer scales losses but the gradient is taken of an unscaled loss; scale it inside the tape"
    _UNSCALED = ("`{optimizer}` scales losses but the gradient in {where} is taken of the unscaled loss; compute "
                 "`{optimizer}.{scale}(loss)` inside the tape")
    messages = {
        "unscaled": _UNSCALED,
        "clip_stays": _UNSCALED + (
            ", and move {transform} after unscaling (the inner optimizer's `global_clipnorm`/`clipnorm`/"
            "`clipvalue`): scaling alone would clip scaled gradients"),
        "maybe_plain": _UNSCALED + (
            ", only when it is a `LossScaleOptimizer` (a plain Keras 2 optimizer has no `{keras2_scale}`: guard "
            "the scaling and the unscaling with `isinstance(..., LossScaleOptimizer)`)"),
        "guarded": _UNSCALED + (
            ", guarded by `isinstance(..., LossScaleOptimizer)`: on Keras 2 it is one only if `compile` ran "
            "under `mixed_float16`"),
        "computed_unused": (
            "`{optimizer}` scales losses and `{scaled}` already holds `{optimizer}.{scale}({loss})`, but the gradient "
            "in {where} is taken of the unscaled `{loss}`, so the update is divided by the scale; take the gradient "
            "of `{scaled}`"),
        "kept_by_object": (
            "`{optimizer}` scales losses but the gradients it applies are taken in `{taken}` of the unscaled loss "
            "and reach it from there (returned, or kept in an object); compute `{optimizer}.{scale}(loss)` inside that tape "
            "(no fix: the update and the gradient are in different functions)"),
    }
    notes = {"no_fix": "no fix: {why}"}
    fix_safety = FixSafety.UNSAFE
    triggers = STEP_TRIGGERS
    explanation = """
        ## What it does
        Finds custom training steps whose optimizer has loss scaling on (a `LossScaleOptimizer`,
        a Keras 3 optimizer with `loss_scale_factor`, or `self.optimizer` / `model.optimizer` of a
        model compiled under `mixed_float16`, which Keras wraps itself) but whose gradient is
        taken of the plain loss.

        ## Why is this bad?
        Keras 3's `apply_gradients` divides the gradients by the loss scale (32768 at first):
        without `scale_loss` every update is 32768 times too small, and float16 gradients still
        underflow. On Keras 2 the LSO does nothing unless `get_scaled_loss` /
        `get_unscaled_gradients` are called. A `train_step` override replaces the one that
        called `scale_loss` for you.

        ## Example
        ```python
        class Model(keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(x, y, self(x, training=True))
                grads = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        ```

        ## Use instead
        ```python
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(x, y, self(x, training=True))
                    scaled_loss = self.optimizer.scale_loss(loss)
                grads = tape.gradient(scaled_loss, self.trainable_variables)
        ```
        (Keras 2: `get_scaled_loss` inside the tape and `get_unscaled_gradients` on the gradients,
        each under `isinstance(self.optimizer, LossScaleOptimizer)` unless the file builds the
        optimizer as one: Keras 2's `compile` wraps it only under `mixed_float16`, and a plain
        Keras 2 optimizer has neither method.)

        ## Fix safety
        Unsafe: the step's numbers change (on purpose).
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
        # Keras 2 code importing tf_keras that scales and unscales: correct as it is.
        Valid("""
            import tensorflow as tf
            import tf_keras
            tf_keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = optimizer.get_scaled_loss(loss)
            grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # Conditional scaling: the user manages it.
        Valid("""
            import tensorflow as tf
            import tf_keras
            tf_keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled = optimizer.get_scaled_loss(loss) if amp else loss
            grads = tape.gradient(scaled, model.trainable_variables)
            if amp:
                grads = optimizer.get_unscaled_gradients(grads)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # Re-entering the tape to scale is still recorded.
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            with tape:
                scaled = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
    ]
    INVALID = [
        # The scaled loss is computed in the tape, but the gradient is taken of the loss: take it of that value.
        Invalid(
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))


            def replica_step(x, y):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
                    scaled_loss = optimizer.scale_loss(loss)
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))


            def replica_step(x, y):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
                    scaled_loss = optimizer.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
        ),
        # train_step override in a keras.Model subclass: compile() wrapped self.optimizer.
        Invalid(
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")


            class Net(keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        y_pred = self(x, training=True)
                        loss = self.compute_loss(x, y, y_pred)  # float32 loss
                    grads = tape.gradient(loss, self.trainable_variables)
                    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                    return {"loss": loss}
            """,
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")


            class Net(keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        y_pred = self(x, training=True)
                        loss = self.compute_loss(x, y, y_pred)  # float32 loss
                        scaled_loss = self.optimizer.scale_loss(loss)
                    grads = tape.gradient(scaled_loss, self.trainable_variables)
                    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                    return {"loss": loss}
            """,
            keras=3,
        ),
        Invalid(
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_float16")


            class Net(tf_keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        loss = self.compiled_loss(y, self(x, training=True))
                    grads = tape.gradient(loss, self.trainable_variables)
                    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                    return {"loss": loss}
            """,
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_float16")


            class Net(tf_keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        loss = self.compiled_loss(y, self(x, training=True))
                        scaled_loss = self.optimizer.get_scaled_loss(loss) if isinstance(self.optimizer, tf_keras.mixed_precision.LossScaleOptimizer) else loss
                    grads = tape.gradient(scaled_loss, self.trainable_variables)
                    if isinstance(self.optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
                        grads = self.optimizer.get_unscaled_gradients(grads)
                    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                    return {"loss": loss}
            """,
            keras=2,
        ),
        # The loss of gradients an object keeps for another method is not scaled: no fix.
        Invalid(
            """
            import keras
            import tensorflow as tf
            keras.mixed_precision.set_global_policy("mixed_float16")


            class GradientAccumulator:
                def __init__(self, variables):
                    self.variables = variables
                    self.sums = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]

                def add(self, grads):
                    for total, g in zip(self.sums, grads):
                        total.assign_add(g)

                def apply(self, optimizer):
                    optimizer.apply_gradients(zip(self.sums, self.variables))


            class Trainer:
                def __init__(self, model):
                    self.model = model
                    self.optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
                    self.accumulator = GradientAccumulator(model.trainable_variables)

                def step(self, x, y):
                    with tf.GradientTape() as tape:
                        loss = tf.reduce_mean(tf.square(y - self.model(x)))
                    grads = tape.gradient(loss, self.model.trainable_variables)
                    self.accumulator.add(grads)

                def update(self):
                    self.accumulator.apply(self.optimizer)
            """,
        ),
        # Keras 2: a library's compiled optimizer may be plain (no `get_scaled_loss`), and the gradient has no name to guard the unscale on: no fix.
        Invalid(
            """
            import tensorflow as tf


            def use_mixed_precision():
                tf.keras.mixed_precision.set_global_policy("mixed_float16")


            class ContrastiveModel(tf.keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        loss = self.compiled_loss(y, self(x, training=True))
                    self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
                    return {"loss": loss}
            """,
            keras=2,
        ),
        # Keras 3: scaling the loss would make this clip act on scaled gradients, and the compiled optimizer is not built here: no fix.
        Invalid(
            """
            import keras
            import tensorflow as tf
            keras.mixed_precision.set_global_policy("mixed_float16")

            class Net(keras.Model):
                def train_step(self, data):
                    with tf.GradientTape() as tape:
                        loss = self.compute_loss(data)
                    grads = tape.gradient(loss, self.trainable_variables)
                    grads, _ = tf.clip_by_global_norm(grads, 1.0)
                    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            """,
            keras=3,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        if self.context.policy is Policy.BFLOAT16:
            return  # MP108: the LSO itself is the problem there
        analysis, flows = step_flows(self.context)
        # One finding per update: an update fed by several gradients (SAM-style steps) gets one fix.
        by_apply: dict[int, list[Flow]] = {}
        for flow in flows:
            if flow.scale is not None or flow.wrapped is not True:
                continue
            if flow.compiled and not self.context.float16:
                continue  # compile only wraps under mixed_float16
            by_apply.setdefault(id(flow.apply.call), []).append(flow)
        for group in by_apply.values():
            flow = group[0]
            fix: dict | None = {}
            variant, note, more = "unscaled", None, {}
            why_not = unfixable_shape(self.context, analysis, flow)
            legacy = why_not is not None and why_not.shape is Shape.LEGACY_OPTIMIZER
            keras = 2 if legacy else self.context.keras
            if why_not is not None:
                fix, note, more = None, "no_fix", {"why": why_not.why}
            # Keras 3: once the loss is scaled, a clip between the gradient and the LSO's apply sees
            # scaled gradients; it moves into the inner optimizer where that is built in the file.
            transforms = [e for f in group for e in f.path.events if e.sensitive] \
                if self.context.keras == 3 and why_not is None else []
            if transforms:
                build = flow.build
                inner = analysis.inner_build(build) if build is not None and build.is_lso else None
                moved = move_clip_changes(self.context, analysis, group, transforms, inner)
                if moved is None:
                    fix = None
                    variant, more = "clip_stays", {"transform": describe(transforms[0])}
                else:
                    changes, new_inner = moved
                    fix = {**changes, inner: new_inner}
            # Keras 2: a compiled model's optimizer is an LSO only if `compile` ran under mixed_float16
            # (a library's own float32 runs get a plain one, which has no get_scaled_loss): guard it.
            guard = any(needs_lso_guard(self.context, member) for member in group)
            for member in group if fix is not None else ():
                step = scaling_changes(self.context, analysis, member, guard=guard)
                if step is None or any(k in fix for k in step):
                    if guard and variant == "unscaled" and note is None:
                        variant, more = "maybe_plain", {"keras2_scale": scale_method(2)}
                    fix = None
                    break
                fix.update(step)
            if guard and fix and variant == "unscaled" and note is None:
                variant = "guarded"
            computed = computed_scaled_loss(analysis, flow) if variant == "unscaled" and len(group) == 1 else None
            if computed is not None:
                variant, more = "computed_unused", {"scaled": computed, "loss": flow.gradient.target.value}
            self.report(
                flow.apply.call,
                variant,
                note=note,
                optimizer=flow.optimizer,
                where=where(flow),
                scale=scale_method(keras),
                **more,
                fix=fix,
                description="Scale the loss inside the tape",
            )
        self._report_cross_flows(analysis, flows)

    def _report_cross_flows(self, analysis, flows: list[Flow]) -> None:
        """An optimizer that scales applies gradients another function took of an unscaled loss and an
        object kept (an accumulator's ``apply``): reported without a fix, the loss is scaled there."""
        seen: set[int] = set()
        local = {id(f.gradient.call) for f in flows}
        for flow in analysis.cross_flows:
            if flow.user_managed or foreign_api(self.context, flow) or flow.scale is not None \
                    or flow.wrapped is not True or (flow.compiled and not self.context.float16):
                continue
            if id(flow.apply.call) in seen or id(flow.gradient.call) in local:
                continue
            seen.add(id(flow.apply.call))
            taken = next((s.name for s, g in analysis.gradients if g is flow.gradient), "another function")
            self.report(flow.apply.call, "kept_by_object", optimizer=flow.optimizer, taken=taken,
                        scale=scale_method(self.context.keras))
