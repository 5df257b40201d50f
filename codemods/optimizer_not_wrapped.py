"""MP101 optimizer-not-wrapped: see the rule's explanation (`mpfix explain MP101`)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._loss_scaling_support import STEP_TRIGGERS, step_flows, where
from mpfix.codemods._manual_loss_scale import manually_scaled
from mpfix.codemods._unwrapped_optimizers import built_by, kept_by_object, unscaled, unseen_builds
from mpfix.codemods.base import Fact, Invalid, Need, Rule, Valid
from mpfix.findings import FixSafety
from mpfix.policy import Policy


class OptimizerNotWrapped(Rule):
    code = "MP101"
    name = "optimizer-not-wrapped"
    uses = frozenset({Fact.GRADIENT_PATH})
    needs = frozenset({Need.GRADIENT_UPDATE})  # an apply_gradients/apply call: every flow's update (the parse gate)
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
            "gradients taken in `{taken}` reach it from there (returned, or kept in an object): wrap it in LossScaleOptimizer "
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
        flows = [f for f in flows if not manually_scaled(analysis, f)]  # a fixed scale by hand: wrapping scales twice
        for flow in unseen_builds(flows):
            built = built_by(self.context, flow)
            if built is not None:
                self.report(flow.apply.call, "built_by_call", optimizer=flow.optimizer, built=built, where=where(flow))
            else:
                self.report(flow.apply.call, "built_unseen", optimizer=flow.optimizer, where=where(flow))
        for found in unscaled(self.context, analysis, flows):
            first = found.first
            if found.clip_stays is not None:
                self.report(first.apply.call, "clip_stays", optimizer=first.optimizer, where=where(first),
                            transform=found.clip_stays)
                continue
            self.report(first.apply.call, "unscaled", optimizer=first.optimizer, where=where(first), fix=found.fix,
                        description="Wrap the optimizer in LossScaleOptimizer and scale the loss",
                        imports=found.imports)
        for flow, taken in kept_by_object(self.context, analysis, flows):
            self.report(flow.apply.call, "kept_by_object", optimizer=flow.optimizer, taken=taken)
