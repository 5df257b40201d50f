"""Forecast the next reading of a raw sensor series; mixed precision comes from mp_setup."""
import numpy as np
import tensorflow as tf

from mp_setup import configure_precision, seed_everything

WINDOW = 1024


class CumulativeMean(tf.keras.layers.Layer):
    """Running mean of the readings seen so far at each time step."""

    def call(self, x):
        positions = tf.cast(tf.range(1, tf.shape(x)[1] + 1), x.dtype)[None, :, None]
        return tf.math.cumsum(x, axis=1) / positions


def build():
    inputs = tf.keras.Input((WINDOW, 1))
    h = tf.keras.layers.Dense(8)(inputs)
    trend = CumulativeMean()(h)
    h = tf.keras.layers.Concatenate()([h, trend])
    h = tf.keras.layers.Conv1D(16, 5, strides=4, activation="relu")(h)
    h = tf.keras.layers.GlobalMaxPooling1D()(h)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(1, dtype="float32")(h))


def train(steps=6):
    configure_precision()
    seed_everything(11)
    series = (150.0 + 20.0 * np.random.default_rng(11).normal(size=(64, WINDOW + 1, 1))).astype("float32")
    x, y = series[:, :-1], series[:, -1]
    model = build()
    optimizer = tf.keras.optimizers.Adam(1e-3)
    for step in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.keras.losses.huber(y, model(x, training=True), delta=10.0))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        print(step, float(loss))


if __name__ == "__main__":
    train()
