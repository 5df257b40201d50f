"""MP101 optimizer-not-wrapped: see the rule's explanation (`mpfix explain MP101`)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._gradient_fixes import describe, move_clip_changes
from mpfix.codemods.analysis.gradient_path import Flow, assigned_targets, training_steps
from mpfix.codemods._loss_scaling_support import (
    STEP_TRIGGERS, foreign_api, scaling_changes, step_flows, where, wrap_changes,
)
from mpfix.codemods.names import dotted_name
from mpfix.codemods.base import Fact, Invalid, Rule, Valid
from mpfix.findings import FixSafety
from mpfix.policy import Policy


class OptimizerNotWrapped(Rule):
    code = "MP101"
    name = "optimizer-not-wrapped"
    uses = frozenset({Fact.GRADIENT_PATH})
    message = ("Custom training loop under mixed_float16 with a bare optimizer: wrap it in "
               "LossScaleOptimizer and scale the loss, or most float16 gradients underflow to zero")
    _UNSCALED = ("`{optimizer}` has no loss scaling under mixed_float16: most float16 gradients underflow to zero; "
                 "wrap it in LossScaleOptimizer and scale the loss in {where}")
    messages = {
        "unscaled": _UNSCALED,
        "clip_stays": _UNSCALED + (
            ", and move {transform} after unscaling (Keras 3: the inner optimizer's "
            "`global_clipnorm`/`clipnorm`/`clipvalue`): scaling alone would clip scaled gradients"),
        "kept_by_object": (
            "`{optimizer}` has no loss scaling under mixed_float16: most float16 gradients underflow to zero; the "
            "gradients taken in `{taken}` reach it through the object that keeps them: wrap it in LossScaleOptimizer "
            "where it is built and scale the loss in `{taken}` (no fix: the update and the gradient are in "
            "different functions)"),
        "built_by_call": (
            "Loss is not scaled under mixed_float16 and `{optimizer}` comes from `{built}`, which mpfix cannot see "
            "into: make sure it returns a LossScaleOptimizer (or wrap its result in one) and scale the loss in "
            "{where}"),
        "built_unseen": (
            "Loss is not scaled under mixed_float16 and mpfix cannot see where `{optimizer}` is built (another "
            "module, a container, or passed through several calls): wrap it in LossScaleOptimizer where it is built "
            "and scale the loss in {where}"),
    }
    fix_safety = FixSafety.UNSAFE
    triggers = STEP_TRIGGERS
    requires_float16 = True
    explanation = """
        ## What it does
        Finds custom training steps (`tf.GradientTape` or `tf.gradients` whose gradients reach
        `optimizer.apply_gradients`) under a `mixed_float16` policy whose optimizer is built
        without loss scaling and whose loss is never scaled.

        ## Why is this bad?
        float16 cannot hold values below ~6e-8 (smallest subnormal). Typical gradients are
        smaller, so they round to exactly 0: in a small MLP ~95% of the gradient entries are
        exactly zero, no error is raised, and training crawls (loss falls 26% where float32
        falls 87%). `model.fit` scales the loss itself; a custom loop must do it by hand.

        ## Example
        ```python
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        optimizer = tf.keras.optimizers.Adam()

        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Use instead
        Keras 3:
        ```python
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())

        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```
        Keras 2 (`tf_keras`, `TF_USE_LEGACY_KERAS=1`): `scaled_loss = optimizer.get_scaled_loss(loss)`
        inside the tape and `grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, vars))`.

        With `--loss-scale N` the fix writes a fixed scale: Keras 3 `Adam(..., loss_scale_factor=N)`
        (Keras 3 has no fixed-scale LossScaleOptimizer), Keras 2
        `LossScaleOptimizer(opt, dynamic=False, initial_scale=N)` (see MP107).

        When the optimizer is built where mpfix cannot see it (another module, passed through
        more than one call), the finding has no fix and says so.

        ## Fix safety
        Unsafe: it changes the numbers the step computes (on purpose). Review with `mpfix diff`.
    """
    VALID = [
        # fit() scripts: compile wraps the optimizer in an LSO by itself.
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
            model.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")
            model.fit(x, y)
        """),
        # float32-only script: no scaling needed.
        Valid("""
            import tensorflow as tf
            optimizer = tf.keras.optimizers.Adam()
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # bfloat16 has float32's exponent range: no loss scaling, never an LSO.
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
            optimizer = tf.keras.optimizers.Adam()
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # minimize(..., tape=tape) scales and unscales by itself.
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            optimizer.minimize(loss, model.trainable_variables, tape=tape)
        """),
        # The user switches scaling on and off: respected.
        Valid("""
            import tensorflow as tf
            from tensorflow.keras import mixed_precision
            mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.optimizers.Adam()
            if amp:
                optimizer = mixed_precision.LossScaleOptimizer(optimizer)
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                if isinstance(optimizer, mixed_precision.LossScaleOptimizer):
                    loss = optimizer.scale_loss(loss)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
    ]
    INVALID = [
        # Keras 3, @tf.function step, module-level optimizer.
        Invalid(
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)


            @tf.function
            def train_step(x, y):
                with tf.GradientTape() as tape:
                    # forward pass
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            """,
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(learning_rate=1e-3))


            @tf.function
            def train_step(x, y):
                with tf.GradientTape() as tape:
                    # forward pass
                    loss = loss_fn(y, model(x, training=True))
                    scaled_loss = optimizer.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            """,
            keras=3,
        ),
        # Keras 3 with clipping: the scaled gradients would be clipped, so the clip moves into the
        # optimizer, which clips after the LossScaleOptimizer has unscaled.
        Invalid(
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = keras.optimizers.SGD(0.1, momentum=0.9)


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                grads, _ = tf.clip_by_global_norm(grads, 5.0)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9, global_clipnorm=5.0))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                    scaled_loss = optimizer.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
        ),
        # Keras 2 (tf_keras), same step.
        Invalid(
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf_keras.optimizers.Adam(learning_rate=1e-3)


            @tf.function
            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            """,
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam(learning_rate=1e-3))


            @tf.function
            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                    scaled_loss = optimizer.get_scaled_loss(loss)
                grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            """,
            keras=2,
        ),
        # Aliased import, optimizer built by a factory in the same module, module-level loop.
        Invalid(
            """
            import tensorflow as tf
            from tensorflow.keras import mixed_precision as mp

            mp.set_global_policy("mixed_float16")


            def make_optimizer(lr):
                return tf.keras.optimizers.SGD(lr)


            opt = make_optimizer(0.1)
            for x, y in dataset:
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf
            from tensorflow.keras import mixed_precision as mp

            mp.set_global_policy("mixed_float16")


            def make_optimizer(lr):
                return mp.LossScaleOptimizer(tf.keras.optimizers.SGD(lr))


            opt = make_optimizer(0.1)
            for x, y in dataset:
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = opt.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
        ),
        # Optimizer passed as an argument: followed to the call site.
        Invalid(
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")


            def train(model, optimizer, data):
                for x, y in data:
                    with tf.GradientTape() as tape:
                        loss = model.compute_loss(x, y, model(x))
                    grads = tape.gradient(loss, model.trainable_variables)
                    optimizer.apply(grads, model.trainable_variables)


            train(build_model(), keras.optimizers.Adam(), data)
            """,
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")


            def train(model, optimizer, data):
                for x, y in data:
                    with tf.GradientTape() as tape:
                        loss = model.compute_loss(x, y, model(x))
                        scaled_loss = optimizer.scale_loss(loss)
                    grads = tape.gradient(scaled_loss, model.trainable_variables)
                    optimizer.apply(grads, model.trainable_variables)


            train(build_model(), keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam()), data)
            """,
            keras=3,
        ),
        # Built in another module: reported without a guess.
        Invalid(
            """
            import tensorflow as tf
            from config import optimizer

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
        ),
        # Gradients one method takes and an object keeps, applied by another method: no fix.
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
                    self.optimizer = keras.optimizers.Adam(1e-3)
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
        # An optimizer from a factory mpfix cannot see into: it may already scale; no fix.
        Invalid(
            """
            import tensorflow as tf
            from official.nlp import optimization
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            def main():
                optimizer = optimization.create_optimizer(3e-5, 1000, 100)
                for x, y in data:
                    with tf.GradientTape() as tape:
                        loss = loss_fn(y, model(x))
                    grads = tape.gradient(loss, model.trainable_variables)
                    optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
        ),
        # Keras 3: a clip mpfix cannot move into the inner optimizer (the norm is a variable): no fix.
        Invalid(
            """
            import keras
            import tensorflow as tf
            keras.mixed_precision.set_global_policy("mixed_float16")
            opt = keras.optimizers.SGD(0.1)
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            grads, _ = tf.clip_by_global_norm(grads, max_norm)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        if self.context.policy is not Policy.FLOAT16:
            return
        analysis, flows = step_flows(self.context)
        groups: dict[int, list[Flow]] = {}
        unknown_seen: set[int] = set()
        for flow in flows:
            if flow.scale is not None or flow.wrapped is True:
                continue
            if flow.build is not None and flow.build.is_v1:
                continue  # a TF1 optimizer: MP112
            if flow.wrapped is None:
                if id(flow.apply.call) in unknown_seen:
                    continue
                unknown_seen.add(id(flow.apply.call))
                self._report_unknown(flow)
                continue
            groups.setdefault(id(flow.build.call), []).append(flow)
        for group in groups.values():
            first = group[0]
            # Keras 3: scaling the loss makes every transform between the gradient and the update act on
            # scaled gradients (the LSO unscales inside apply); a constant clip moves into the optimizer.
            transforms = [e for f in group for e in f.path.events if e.sensitive] if self.context.keras == 3 else []
            inner = None
            moved_changes: dict = {}
            if transforms:
                moved = move_clip_changes(self.context, analysis, group, transforms, first.build.call)
                if moved is None:
                    self.report(first.apply.call, "clip_stays", optimizer=first.optimizer, where=where(first),
                                transform=describe(transforms[0]))
                    continue
                moved_changes, inner = moved
            changes, imports = wrap_changes(self.context, first.build, inner)
            fix: dict | None = {**changes, **moved_changes}
            for flow in group:
                step = scaling_changes(self.context, analysis, flow)
                if step is None or any(k in fix for k in step):
                    fix = None
                    break
                fix.update(step)
            self.report(
                first.apply.call,
                "unscaled",
                optimizer=first.optimizer,
                where=where(first),
                fix=fix,
                description="Wrap the optimizer in LossScaleOptimizer and scale the loss",
                imports=imports,
            )
        self._report_cross_flows(analysis, flows)

    def _report_cross_flows(self, analysis, flows: list[Flow]) -> None:
        """Updates of gradients another function took and an object kept (an accumulator class's
        ``apply`` of what ``add`` summed): reported without a fix, the scaling goes where they are taken."""
        seen: set[int] = set()
        local = {id(f.gradient.call) for f in flows}
        for flow in analysis.cross_flows:
            if flow.user_managed or foreign_api(self.context, flow) or flow.scale is not None \
                    or flow.wrapped is not False or (flow.build is not None and flow.build.is_v1):
                continue
            if id(flow.apply.call) in seen or id(flow.gradient.call) in local:
                continue  # one finding per update; a gradient updated in its own function is reported there
            seen.add(id(flow.apply.call))
            taken = next((s.name for s, g in analysis.gradients if g is flow.gradient), "another function")
            self.report(flow.apply.call, "kept_by_object", optimizer=flow.optimizer, taken=taken)

    def _report_unknown(self, flow: Flow) -> None:
        built = self._built_by(flow)
        if built is not None:
            self.report(flow.apply.call, "built_by_call", optimizer=flow.optimizer, built=built, where=where(flow))
        else:
            self.report(flow.apply.call, "built_unseen", optimizer=flow.optimizer, where=where(flow))

    def _built_by(self, flow: Flow) -> str | None:
        """The call that binds the optimizer in the step's own function or the module, if any."""
        analysis = training_steps(self.context)
        for scope in (flow.scope, *analysis.enclosing(flow.scope), analysis.scopes[0]):
            for st in reversed(scope.statements):
                for target, value in assigned_targets(st.node):
                    if dotted_name(target) == flow.optimizer and isinstance(value, cst.Call):
                        return self.context.code(value.func) + "(...)"
        return None
