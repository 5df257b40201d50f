"""MP205 classes found on the held-out scripts of ``benchmarks/unseen`` (issue 18), each as a realistic
snippet of the class (not the benchmark file).

- A subclassed model's output layer is the layer whose result its ``call`` returns
  (``self.head = Dense(1)`` in ``__init__``, ``return self.head(h)``): when a loss sees the model
  (its own ``train_step``, ``compile``/``fit``, a training step calling it), a float16 head is the
  same bug as in a functional model.
- A model whose output every training step casts to float32 before anything else
  (``tf.cast(decoder(z), tf.float32)``) feeds no loss in float16: a linear head is left alone
  (a fused softmax/sigmoid is still float16 before the cast).
"""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

BOTH = pytest.mark.parametrize("keras", [2, 3])
_IMPORT = {3: "import keras", 2: "import tf_keras as keras"}


def found(code: str, keras: int = 3) -> list[tuple[str, int, bool]]:
    result = lint_snippet(code, "MP205", keras=keras, policy=None, fix=False, filename="train.py")
    return sorted((f.code, f.line, f.fix is not None) for f in result.findings)


SUBCLASSED = """
    {import_keras}
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")


    class DemandForecaster(keras.Model):
        def __init__(self, units=64):
            super().__init__()
            self.encoder = keras.layers.Dense(units, activation="relu")
            self.dropout = keras.layers.Dropout(0.2)
            self.out = keras.layers.Dense(1{head_args})

        def call(self, inputs, training=False):
            h = self.dropout(self.encoder(inputs), training=training)
            return self.out(h)
    {training}
"""

OWN_TRAIN_STEP = """
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                pred = self(x, training=True)
                loss = tf.reduce_mean(tf.square(pred - tf.cast(y, pred.dtype)))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {"loss": loss}
"""

COMPILED = """

    model = DemandForecaster()
    model.compile(optimizer="adam", loss="mse")
    model.fit(features, demand, epochs=3)
"""


@BOTH
@pytest.mark.parametrize("training", [OWN_TRAIN_STEP, COMPILED], ids=["train_step", "compile"])
def test_the_head_a_subclassed_models_call_returns_is_its_output_layer(keras, training):
    code = SUBCLASSED.format(import_keras=_IMPORT[keras], head_args="", training=training)
    assert found(code, keras) == [("MP205", 12, True)]


@BOTH
def test_a_float32_subclassed_head_is_left_alone(keras):
    code = SUBCLASSED.format(import_keras=_IMPORT[keras], head_args=', dtype="float32"', training=COMPILED)
    assert found(code, keras) == []


def test_a_subclassed_model_nobody_trains_here_is_left_alone():
    assert found(SUBCLASSED.format(import_keras=_IMPORT[3], head_args="", training=""), 3) == []


def test_a_subclassed_block_whose_call_returns_a_hidden_activation_is_left_alone():
    code = SUBCLASSED.format(import_keras=_IMPORT[3], head_args=', activation="gelu"', training=COMPILED)
    assert found(code, 3) == []


CAST_BY_THE_STEP = """
    import tensorflow as tf

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    decoder = tf.keras.Sequential([tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(784{head_args})])
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


    @tf.function
    def train_step(z, images):
        with tf.GradientTape() as tape:
            logits = tf.cast(decoder(z, training=True), tf.float32)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=images, logits=logits))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, decoder.trainable_variables)
        optimizer.apply_gradients(zip(grads, decoder.trainable_variables))
"""


def test_a_linear_head_whose_every_use_is_cast_to_float32_is_left_alone():
    assert found(CAST_BY_THE_STEP.format(head_args=""), 3) == []


def test_a_fused_sigmoid_head_is_float16_before_the_cast():
    assert found(CAST_BY_THE_STEP.format(head_args=', activation="sigmoid"'), 3) == [("MP205", 4, True)]


def test_one_uncast_use_keeps_the_linear_head_flagged():
    code = CAST_BY_THE_STEP.format(head_args="") + """

    @tf.function
    def pretrain_step(z, images):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(decoder(z, training=True) - images))
        return tape.gradient(loss, decoder.trainable_variables)
"""
    assert found(code, 3) == [("MP205", 4, True)]
