"""Keras 2 MLP with a hand-written RMS normalization layer, trained with fit."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow import keras  # noqa: E402


class RMSNorm(keras.layers.Layer):
    def __init__(self, epsilon=1e-8, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.gain = self.add_weight(name="gain", shape=(input_shape[-1],), initializer="ones")

    def call(self, x):
        ms = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
        return x * tf.math.rsqrt(ms + self.epsilon) * self.gain


def build_model():
    return keras.Sequential(
        [
            keras.layers.Dense(128, input_shape=(32,)),
            RMSNorm(),
            keras.layers.Activation("swish"),
            keras.layers.Dense(128),
            RMSNorm(),
            keras.layers.Activation("swish"),
            keras.layers.Dense(5, dtype="float32"),
        ]
    )


if __name__ == "__main__":
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(9)
    x = rng.normal(size=(256, 32)).astype("float32")
    y = rng.integers(0, 5, size=256)
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(x, y, batch_size=32, epochs=1, steps_per_epoch=4, verbose=2)
