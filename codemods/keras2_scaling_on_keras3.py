"""MP303 keras2-scaling-on-keras3: the loss-scaling methods of the other Keras generation.

Keras 2 scales a custom loop with ``get_scaled_loss`` + ``get_unscaled_gradients``; Keras 3 has
``scale_loss`` and unscales inside ``apply_gradients``. Each spelling is an ``AttributeError`` on the
other generation. This rule only translates calls that are there; missing scaling is MP101–MP103's
business. Dropping an unscale is only right where the gradient path from it to the update has no
scale-sensitive transform (``mpfix.codemods.analysis.gradient_path``).
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods import _api_table as table
from mpfix.codemods._mp_api_support import ApiDriftRule
from mpfix.codemods._other_generation_scaling import Scaling, Translation
from mpfix.codemods.base import Fact, Invalid, Valid
from mpfix.findings import FixSafety


class Keras2ScalingOnKeras3(ApiDriftRule):
    code = "MP303"
    name = "keras2-scaling-on-keras3"
    uses = frozenset({Fact.VERSION_GUARDS, Fact.GRADIENT_PATH})
    message = "Loss-scaling method of the other Keras generation; use the target generation's method"
    _UNSCALE = ("`get_unscaled_gradients` does not exist in Keras 3: `apply_gradients` of a LossScaleOptimizer "
                "unscales by itself")
    messages = {
        "scaled_loss": "`get_scaled_loss` does not exist in Keras 3; use `{new}`",
        "unscale": _UNSCALE,
        "unscale_unseen": _UNSCALE + " (mpfix cannot see the update these gradients reach)",
        "unscale_other_optimizer": _UNSCALE + (
            "; the unscaled gradients also reach `{optimizer}`, which does not unscale them: keep the division by "
            "`{owner}`'s scale for it (by hand) before dropping this call"),
        "unscale_clip_stays": _UNSCALE + (
            "; dropping it alone would leave {transform} acting on scaled gradients (Keras 3 unscales inside "
            "`apply_gradients`): clip with the inner optimizer's `global_clipnorm`/`clipnorm`/`clipvalue` instead"),
        "unscale_clip_moves": _UNSCALE + (
            "; {transform} moves into the inner optimizer, which clips after the LossScaleOptimizer unscaled"),
        "keras3_scaling": ("`scale_loss` is Keras 3; Keras 2 scales with `get_scaled_loss` and unscales with "
                           "`get_unscaled_gradients`"),
    }
    notes = {
        "unscale_by_hand": "together with its `get_unscaled_gradients`, which needs a hand edit: see that finding",
        "unscale_fixed_too": "fixed together with its `get_unscaled_gradients`: one fix, see that finding",
        "other_unscale_by_hand": "no fix: another unscale of the same scaled loss needs a hand edit",
        "no_gradient": "mpfix cannot find the `tape.gradient` of this scaled loss",
    }
    fix_safety = FixSafety.SAFE
    triggers = ("get_scaled_loss", "get_unscaled_gradients", "scale_loss(")
    explanation = """
        ## What it does
        Where Keras 3 runs, finds `optimizer.get_scaled_loss(loss)` and
        `optimizer.get_unscaled_gradients(grads)`; where Keras 2 runs (including any file that
        imports `tf_keras`), finds `optimizer.scale_loss(loss)`.

        ## Why is this bad?
        Each is an `AttributeError` on the other generation, raised at the first training step.
        The TF mixed-precision guide still shows the Keras 2 form, so scripts copied from it stop
        working when `tf.keras` becomes Keras 3 (TF 2.16). Keras 3's `apply_gradients` unscales
        the gradients itself, so the unscale call has no Keras 3 counterpart; Keras 2's does not,
        so moving to Keras 2 needs both calls.

        ## Example
        ```python
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            scaled_loss = optimizer.get_scaled_loss(loss)
        scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = optimizer.get_unscaled_gradients(scaled_grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Use instead
        On Keras 3:
        ```python
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            scaled_loss = optimizer.scale_loss(loss)
        scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = scaled_grads
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Fix safety
        Safe towards Keras 3 (every Keras 3 optimizer has `scale_loss`, and a LossScaleOptimizer
        unscales in `apply_gradients`). Towards Keras 2 the fix is safe when the optimizer is
        built as a `LossScaleOptimizer` in the same file, unsafe otherwise (a bare Keras 2
        optimizer has no `get_scaled_loss`); where mpfix cannot find the `tape.gradient` of the
        scaled loss, it reports without a fix.
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = optimizer.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
        # Keras 2 code (the TF Model Garden imports tf_keras): correct there, left alone.
        Valid("""
            import tf_keras

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = optimizer.get_scaled_loss(loss_fn(y, model(x)))
                grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # A custom optimizer defining the method itself.
        Valid("""
            class MyScaler:
                def get_scaled_loss(self, loss):
                    return loss * 8

            scaled = MyScaler().get_scaled_loss(1.0)
        """, keras=3),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = optimizer.get_scaled_loss(loss)
                scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = optimizer.get_unscaled_gradients(scaled_grads)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = optimizer.scale_loss(loss)
                scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = scaled_grads
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3, count=2,
        ),
        # Unscaling in place: the statement has nothing left to do on Keras 3.
        Invalid(
            """
            def train_step(self, data):
                with tf.GradientTape() as tape:
                    scaled = self.optimizer.get_scaled_loss(self.compute_loss(data))
                grads = tape.gradient(scaled, self.trainable_variables)
                grads = self.optimizer.get_unscaled_gradients(grads)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            """,
            """
            def train_step(self, data):
                with tf.GradientTape() as tape:
                    scaled = self.optimizer.scale_loss(self.compute_loss(data))
                grads = tape.gradient(scaled, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            """,
            keras=3, count=2,
        ),
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = opt.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = opt.get_scaled_loss(loss)
                grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=2,
        ),
        # Scaling written straight into the gradient call.
        Invalid(
            """
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD())

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    grads = tape.gradient(opt.scale_loss(loss), model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD())

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    grads = opt.get_unscaled_gradients(tape.gradient(opt.get_scaled_loss(loss), model.trainable_variables))
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
        ),
        # Clipping after the unscale: Keras 3 unscales inside apply, so the clip moves into the inner
        # optimizer (dropping the unscale alone would clip gradients 32768x too large).
        Invalid(
            """
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = opt.get_unscaled_gradients(grads)
                grads, _ = tf.clip_by_global_norm(grads, 1.0)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, global_clipnorm=1.0))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3, count=2,
        ),
        # Half of the unscaled gradients go to a second, plain optimizer: the unscale stays (no fix).
        Invalid(
            """
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
            head_opt = keras.optimizers.SGD(0.01)


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, variables))
                opt.apply_gradients(zip(grads[:n], variables[:n]))
                head_opt.apply_gradients(zip(grads[n:], variables[n:]))
            """,
            keras=3, count=2,
        ),
        # No gradient of the scaled loss in sight: reported, not guessed.
        Invalid(
            """
            def scaled(loss):
                return optimizer.scale_loss(loss)
            """,
            keras=2,
        ),
        # The unscaled gradients are returned: mpfix cannot see the update, so dropping the unscale is unsafe.
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))


            def gradients(model, x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                return opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))


            def gradients(model, x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
                return tape.gradient(scaled_loss, model.trainable_variables)
            """,
            keras=3,
            count=2,
        ),
        # A clip after the unscale would act on scaled gradients: no fix for either call.
        Invalid(
            """
            import tensorflow as tf

            def step(model, opt, x, y, clip_norm):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
                grads, _ = tf.clip_by_global_norm(grads, clip_norm)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
            count=2,
        ),
    ]

    def __init__(self, context) -> None:
        super().__init__(context)
        self._scaling = Scaling(context)

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.keras == table.KERAS3:
            self._report(self._scaling.of_keras2_call(node))

    def leave_Module(self, original_node: cst.Module) -> None:
        if self.context.keras == table.KERAS2:
            for found in self._scaling.of_keras3_calls():
                self._report(found)

    def _report(self, found: Translation | None) -> None:
        if found is not None:
            self.report(found.call, found.template, note=found.note, **found.fields, fix=found.fix,
                        safety=found.safety, description=found.description)
