"""tf_keras purchase prediction from irregular clickstream sessions: a custom time-aware GRU cell (in the
spirit of Time-LSTM / T-LSTM) reads each event's features plus the log of the seconds since the previous
event, and decays its state by that gap; keras.layers.RNN runs the cell, fit on sessions of 60 events."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
from tensorflow import keras

EVENTS, KINDS = 60, 8


class TimeGapGRUCell(keras.layers.Layer):
    """GRU whose input gets log(gap) and whose state decays by exp(-gap / tau) before the update."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        features = input_shape[-1]  # event features, then the gap in seconds in the last column
        self.kernel = self.add_weight(name="kernel", shape=(features, 3 * self.units), initializer="glorot_uniform")
        self.recurrent_kernel = self.add_weight(name="recurrent_kernel", shape=(self.units, 3 * self.units),
                                                initializer="orthogonal")
        self.bias = self.add_weight(name="bias", shape=(3 * self.units,), initializer="zeros")
        self.log_tau = self.add_weight(name="log_tau", shape=(self.units,), initializer=keras.initializers.Constant(5.0))

    def call(self, inputs, states):
        h = states[0]
        gap = inputs[:, -1:]
        x = tf.concat([inputs[:, :-1], tf.math.log(gap + 1e-8)], axis=-1)
        h = h * tf.exp(-gap / tf.exp(self.log_tau))
        xz, xr, xh = tf.split(tf.matmul(x, self.kernel) + self.bias, 3, axis=-1)
        hz, hr, hh = tf.split(tf.matmul(h, self.recurrent_kernel), 3, axis=-1)
        z = tf.sigmoid(xz + hz)
        r = tf.sigmoid(xr + hr)
        candidate = tf.tanh(xh + r * hh)
        h = z * h + (1.0 - z) * candidate
        return h, [h]


def make_sessions(n=6000, seed=6):
    rng = np.random.default_rng(seed)
    kinds = rng.integers(0, KINDS, (n, EVENTS))
    gaps = rng.exponential(40.0, (n, EVENTS)).round()  # logged with one-second resolution: bursts give 0
    buys = ((kinds == 5).sum(1) + (gaps < 5).sum(1) * 0.3 + rng.normal(0, 1, n) > 11).astype("float32")
    x = np.concatenate([np.eye(KINDS)[kinds], gaps[..., None]], axis=-1).astype("float32")
    return x, buys[:, None]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_sessions()
    model = keras.Sequential([
        keras.Input((EVENTS, KINDS + 1)),
        keras.layers.RNN(TimeGapGRUCell(64)),
        keras.layers.Dense(1, activation="sigmoid", dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(3e-3), loss="binary_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=128, epochs=3, validation_split=0.2, verbose=2)


if __name__ == "__main__":
    main()
