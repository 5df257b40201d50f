"""MP108 loss-scaling-with-bfloat16: see the rule's explanation (`mpfix explain MP108`)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.gradient_path import UNSCALE_METHOD, training_steps
from mpfix.codemods._loss_scaling_support import K2_SCALE
from mpfix.codemods.base import Fact, Invalid, Rule, Valid
from mpfix.findings import FixSafety
from mpfix.policy import Policy


class LossScalingWithBfloat16(Rule):
    code = "MP108"
    name = "loss-scaling-with-bfloat16"
    uses = frozenset({Fact.GRADIENT_PATH})
    message = "LossScaleOptimizer under a mixed_bfloat16 policy: bfloat16 needs no loss scaling; remove it"
    fix_safety = FixSafety.UNSAFE
    triggers = ("LossScaleOptimizer",)
    explanation = """
        ## What it does
        Finds a `LossScaleOptimizer` in code whose policy is `mixed_bfloat16` (and no float16).

        ## Why is this bad?
        bfloat16 has float32's exponent range: gradients do not underflow and loss scaling only
        adds work (and, with a dynamic scale, spurious skipped steps). TPUs use bfloat16; some
        code paths refuse the LSO there.

        ## Example
        ```python
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        ```

        ## Use instead
        ```python
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
        optimizer = tf.keras.optimizers.Adam()
        ```
        On Keras 2 the fix also removes `get_scaled_loss` / `get_unscaled_gradients` (a plain
        optimizer does not have them). On Keras 3, `scale_loss` of a plain optimizer returns the
        loss unchanged, so it may stay.

        ## Fix safety
        Unsafe: it removes code.
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            """,
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
            optimizer = tf.keras.optimizers.Adam()
            """,
        ),
        Invalid(
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = opt.get_scaled_loss(loss)
            grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
            opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
            opt = tf_keras.optimizers.Adam()
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = loss
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=2,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        if self.context.policy is not Policy.BFLOAT16:
            return
        analysis = training_steps(self.context)
        for build in analysis.builds:
            if not build.is_lso:
                continue
            call = build.call
            inner = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "inner_optimizer"), None)
            if inner is None:
                self.report(call)
                continue
            fix: dict = {call: inner}
            if self.context.keras == 2:
                for scale in analysis.scale_calls:
                    if scale.optimizer == build.target and scale.method in (K2_SCALE, UNSCALE_METHOD) \
                            and len(scale.call.args) == 1:
                        fix[scale.call] = scale.call.args[0].value
            self.report(call, fix=fix, description="Remove the LossScaleOptimizer")
