"""Keras 3 small transformer encoder with a ScaleNorm layer whose gain must stay float32."""
import numpy as np
import keras
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")


class ScaleNorm(layers.Layer):
    """x * g / ||x||, with a single learned gain kept in float32 for the optimizer."""

    def __init__(self, epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.gain = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(float(input_shape[-1]) ** 0.5), dtype="float32", autocast=False, name="gain"
        )

    def call(self, x):
        norm = ops.sqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)
        return x / norm * self.gain


def encoder_block(x, heads=4, dim=64):
    h = ScaleNorm()(x)
    h = layers.MultiHeadAttention(heads, dim // heads)(h, h)
    x = x + h
    h = ScaleNorm()(x)
    h = layers.Dense(4 * dim, activation="gelu")(h)
    return x + layers.Dense(dim)(h)


def build(vocab=1000, length=64, dim=64):
    ids = keras.Input((length,), dtype="int32")
    x = layers.Embedding(vocab, dim)(ids)
    x = encoder_block(encoder_block(x))
    x = layers.GlobalAveragePooling1D()(x)
    return keras.Model(ids, layers.Dense(5, dtype="float32")(x))


if __name__ == "__main__":
    rng = np.random.default_rng(6)
    ids = rng.integers(0, 1000, size=(128, 64))
    labels = rng.integers(0, 5, size=(128,))
    model = build()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ids, labels, batch_size=32, epochs=1, verbose=2)
