"""MP110: gradients divided by the loss scale by hand, then unscaled again by the optimizer, also when
(1) the scale is read once into a local name (``scale = self.optimizer.dynamic_scale``; ``g / scale``), and
(2) the division happens in a closure that applies accumulated gradients (``def apply(): ... [slot / scale for
slot in self.accum]`` handed to ``tf.cond``), the accumulators filled by ``assign_add`` in the enclosing step.
Wave 5 of the held-out scripts: accum_train_step_k3.py (ran: summed weight change 0.00016 against 4.95 without the
manual division). Across functions the finding has no fix (the division and the update are in different
functions, as for MP109's accumulator flows)."""

from __future__ import annotations

import textwrap

import pytest

from mpfix.testing import lint_snippet

ACCUM = """
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")


    class AccumModel(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
                scaled = self.optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, self.trainable_variables)
            for slot, g in zip(self.accum, grads):
                slot.assign_add(g / 4)

            def apply():
                scale = self.optimizer.dynamic_scale
                unscaled = [slot / {divisor} for slot in self.accum]
                self.optimizer.apply_gradients(zip(unscaled, self.trainable_variables))
                for slot in self.accum:
                    slot.assign(tf.zeros_like(slot))
                return tf.constant(True)

            tf.cond(self.iterations % 4 == 0, apply, lambda: tf.constant(False))
            return self.compute_metrics(x, y, y_pred)
"""

DIRECT = {
    3: """
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                scaled = optimizer.scale_loss(loss_fn(y, model(x, training=True)))
            grads = tape.gradient(scaled, model.trainable_variables)
            scale = optimizer.dynamic_scale
            grads = [g / scale for g in grads]
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """,
    2: """
        import tensorflow as tf
        import tf_keras as keras

        keras.mixed_precision.set_global_policy("mixed_float16")
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                scaled = optimizer.get_scaled_loss(loss_fn(y, model(x, training=True)))
            grads = tape.gradient(scaled, model.trainable_variables)
            scale = optimizer.loss_scale
            grads = [g / scale for g in grads]
            grads = optimizer.get_unscaled_gradients(grads)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """,
}


def findings(code: str, keras: int) -> list[tuple[str, int, bool]]:
    result = lint_snippet(code, "MP110", keras=keras, policy=None, filename="train.py")
    return [(f.code, f.line, f.fix is not None) for f in result.findings]


def line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(textwrap.dedent(code).lstrip("\n").splitlines(), 1) if text in line)


@pytest.mark.parametrize("divisor", ["scale", "self.optimizer.dynamic_scale"])
def test_accumulated_gradients_unscaled_by_hand_in_a_closure(divisor):
    code = ACCUM.format(divisor=divisor)
    assert findings(code, 3) == [("MP110", line_of(code, "unscaled = ["), False)]


def test_accumulated_gradients_without_manual_division_are_clean():
    code = ACCUM.format(divisor="1").replace("[slot / 1 for slot in self.accum]", "list(self.accum)")
    assert findings(code, 3) == []


@pytest.mark.parametrize("keras", [2, 3])
def test_scale_read_into_a_local_name(keras):
    code = DIRECT[keras]
    assert findings(code, keras) == [("MP110", line_of(code, "g / scale"), True)] if keras == 3 else \
        [("MP110", line_of(code, "get_unscaled_gradients(grads)"), True)]


ORBIT_LIKE = """
    import tensorflow as tf


    class SingleTaskTrainer:
        def __init__(self, model, loss_fn, optimizer):
            self.model, self.loss_fn, self.optimizer = model, loss_fn, optimizer
            self.strategy = tf.distribute.get_strategy()

        def train_step(self, iterator):
            def train_fn(inputs):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(self.loss_fn(inputs["y"], self.model(inputs, training=True)))
                gradients = tape.gradient(loss, self.model.trainable_variables)
                self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))

            self.strategy.run(train_fn, args=(next(iterator),))
"""


def test_closure_in_a_non_keras_train_step_is_not_a_compiled_optimizer():
    # An orbit-style trainer: its optimizer is the constructor's argument, not Keras compile's LSO, so the
    # unscaled loss is not "scaled by the optimizer" (MP102); under a forced policy it is MP101's question.
    result = lint_snippet(ORBIT_LIKE, ("MP101", "MP102"), keras=3, policy="mixed_float16", filename="train.py")
    assert [f.code for f in result.findings] == ["MP101"]
