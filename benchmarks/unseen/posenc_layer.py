"""Keras 3 time-series transformer encoder with sinusoidal position encodings added in a layer."""
import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")


class SinusoidalPosition(tf.keras.layers.Layer):
    def call(self, x):
        length, dim = tf.shape(x)[1], x.shape[-1]
        positions = tf.cast(tf.range(length), tf.float32)[:, None]
        rates = 1.0 / tf.pow(10000.0, tf.cast(tf.range(0, dim, 2), tf.float32) / dim)
        angles = positions * rates[None, :]
        encoding = tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)
        return x + encoding[None, :, :]


def build(steps=48, features=6, dim=32):
    inputs = tf.keras.Input((steps, features))
    h = SinusoidalPosition()(tf.keras.layers.Dense(dim)(inputs))
    h = tf.keras.layers.MultiHeadAttention(4, dim // 4)(h, h)
    h = tf.keras.layers.GlobalAveragePooling1D()(h)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(1, dtype="float32")(h))


if __name__ == "__main__":
    rng = np.random.default_rng(36)
    x = rng.normal(size=(64, 48, 6)).astype("float32")
    y = x[:, -1, :1]
    model = build()
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, batch_size=16, epochs=1, steps_per_epoch=2, verbose=2)
