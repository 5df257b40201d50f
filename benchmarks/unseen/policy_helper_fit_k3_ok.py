"""Keras 3: policy from a project helper, a keras.ops attention-pooling layer, compile/fit."""
import numpy as np
import keras
from keras import ops

from w8_precision import configure

POLICY = configure()


class AttentionPool(keras.layers.Layer):
    """Learned-query attention pooling over time steps; the softmax runs in float32."""

    def build(self, input_shape):
        self.query = self.add_weight(shape=(input_shape[-1],), initializer="glorot_uniform", name="query")

    def call(self, x, mask=None):
        scores = ops.einsum("btd,d->bt", x, self.query) * (x.shape[-1] ** -0.5)
        scores = ops.cast(scores, "float32")
        if mask is not None:
            scores = ops.where(mask, scores, -1e9)
        weights = ops.softmax(scores, axis=-1)
        return ops.einsum("bt,btd->bd", ops.cast(weights, x.dtype), x)

    def compute_mask(self, x, mask=None):
        return None


inputs = keras.Input((None,), dtype="int32")
h = keras.layers.Embedding(1000, 64, mask_zero=True)(inputs)
h = keras.layers.Conv1D(64, 3, padding="same", activation="relu")(h)
h = AttentionPool()(h)
outputs = keras.layers.Dense(3, activation="softmax", dtype="float32")(h)
model = keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

rng = np.random.default_rng(6)
x = rng.integers(1, 1000, size=(1024, 40))
x[:, 30:] = 0
y = x[:, 0] % 3
print(POLICY, model.fit(x, y, batch_size=64, epochs=3, verbose=2).history)
