"""MP103 gradients-not-unscaled: see the rule's explanation (`mpfix explain MP103`)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.gradient_path import SCALED, OptimizerKind, training_steps
from mpfix.codemods._loss_scaling_support import K2_SCALE, unscale_call
from mpfix.codemods.base import Fact, Invalid, Rule, Valid
from mpfix.findings import FixSafety


class GradientsNotUnscaled(Rule):
    code = "MP103"
    name = "gradients-not-unscaled"
    uses = frozenset({Fact.GRADIENT_PATH})
    message = ("Keras 2: gradients of `get_scaled_loss` reach `apply_gradients` without "
               "`get_unscaled_gradients`; every update is multiplied by the loss scale")
    messages = {"not_unscaled": "Gradients of `{optimizer}.get_scaled_loss(...)` reach `apply_gradients` without "
                                "`{optimizer}.get_unscaled_gradients(...)`: Keras 2 applies them multiplied by the "
                                "loss scale",
                "kept_by_object": "Gradients of `{scaler}.get_scaled_loss(...)` taken in `{taken}` and kept by an object "
                                  "reach `{optimizer}.apply_gradients` without `get_unscaled_gradients(...)`: Keras 2 "
                                  "applies them multiplied by the loss scale"}
    fix_safety = FixSafety.SAFE
    triggers = ("get_scaled_loss",)
    keras_generations = (2,)
    explanation = """
        ## What it does
        Keras 2 only: finds steps that take the gradient of `optimizer.get_scaled_loss(loss)` and
        pass it to `apply_gradients` without `optimizer.get_unscaled_gradients(...)`.

        ## Why is this bad?
        Keras 2's `LossScaleOptimizer.apply_gradients` does not unscale: every update is the
        loss scale (32768 at first) times too large. With SGD the loss is inf by the second step;
        Keras only logs a warning.

        ## Example
        ```python
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            scaled_loss = optimizer.get_scaled_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Use instead
        ```python
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
        ```

        ## Fix safety
        Safe: it completes the pair the code already started; the result is what Keras 2 documents.
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            import tf_keras
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = optimizer.get_scaled_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            grads = optimizer.get_unscaled_gradients(grads)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        Valid("""
            import tensorflow as tf
            import tf_keras
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled = optimizer.get_scaled_loss(loss) if amp else loss
            grads = tape.gradient(scaled, model.trainable_variables)
            grads = optimizer.get_unscaled_gradients(grads) if amp else grads
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
    ]
    INVALID = [
        # Scaled gradients kept by an accumulator and applied by its other method: no fix (two functions).
        Invalid(
            """
            import tensorflow as tf
            import tf_keras

            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.01))


            class Accumulator:
                def __init__(self, variables):
                    self.variables = variables
                    self.sums = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]

                def add(self, grads):
                    for total, g in zip(self.sums, grads):
                        total.assign_add(g)

                def apply(self, opt):
                    opt.apply_gradients(zip(self.sums, self.variables))


            accumulator = Accumulator(model.trainable_variables)


            def micro_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = optimizer.get_scaled_loss(loss_fn(y, model(x)))
                accumulator.add(tape.gradient(scaled_loss, model.trainable_variables))


            accumulator.apply(optimizer)
            """,
            keras=2,
        ),
        # Two optimizers on one persistent tape (a GAN): both forget to unscale.
        Invalid(
            """
            import tensorflow as tf
            from tf_keras import mixed_precision

            mixed_precision.set_global_policy("mixed_float16")
            gen_opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            disc_opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


            @tf.function
            def train_step(noise, real):
                with tf.GradientTape(persistent=True) as tape:
                    fake = generator(noise, training=True)
                    gen_loss = g_loss(discriminator(fake, training=True))
                    disc_loss = d_loss(discriminator(real, training=True), discriminator(fake, training=True))
                    scaled_gen = gen_opt.get_scaled_loss(gen_loss)
                    scaled_disc = disc_opt.get_scaled_loss(disc_loss)
                g_grads = tape.gradient(scaled_gen, generator.trainable_variables)
                d_grads = tape.gradient(scaled_disc, discriminator.trainable_variables)
                gen_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
                disc_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
            """,
            """
            import tensorflow as tf
            from tf_keras import mixed_precision

            mixed_precision.set_global_policy("mixed_float16")
            gen_opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            disc_opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


            @tf.function
            def train_step(noise, real):
                with tf.GradientTape(persistent=True) as tape:
                    fake = generator(noise, training=True)
                    gen_loss = g_loss(discriminator(fake, training=True))
                    disc_loss = d_loss(discriminator(real, training=True), discriminator(fake, training=True))
                    scaled_gen = gen_opt.get_scaled_loss(gen_loss)
                    scaled_disc = disc_opt.get_scaled_loss(disc_loss)
                g_grads = gen_opt.get_unscaled_gradients(tape.gradient(scaled_gen, generator.trainable_variables))
                d_grads = disc_opt.get_unscaled_gradients(tape.gradient(scaled_disc, discriminator.trainable_variables))
                gen_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
                disc_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
            """,
            keras=2,
            count=2,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        analysis = training_steps(self.context)
        for flow in analysis.flows:
            if flow.user_managed or flow.unscaled or flow.scale is None or flow.scale.method != K2_SCALE:
                continue
            if flow.scale.optimizer != flow.optimizer or SCALED not in flow.path.states:
                continue  # another optimizer applies them (MP111), or they are unscaled on the way
            call = flow.gradient.call
            self.report(
                flow.apply.call,
                "not_unscaled",
                optimizer=flow.optimizer,
                fix={call: unscale_call(flow.optimizer, call)},
                description="Unscale the gradients with get_unscaled_gradients",
            )
        # Gradients an object keeps for another method (an accumulator's `apply`): no fix, the unscale
        # belongs in whichever function the user keeps the scale's owner.
        seen = {id(f.apply.call) for f in analysis.flows}
        for flow in analysis.cross_flows:
            if flow.user_managed or flow.scale is None or flow.scale.method != K2_SCALE \
                    or flow.kind is not OptimizerKind.LSO or SCALED not in flow.path.states:
                continue
            if id(flow.apply.call) in seen:
                continue
            seen.add(id(flow.apply.call))
            taken = next((s.name for s, g in analysis.gradients if g is flow.gradient), "another function")
            self.report(flow.apply.call, "kept_by_object", scaler=flow.scale.optimizer, taken=taken,
                        optimizer=flow.optimizer)
