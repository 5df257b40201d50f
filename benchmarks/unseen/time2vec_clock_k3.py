"""Keras 3 smart-meter load forecaster with a Time2Vec layer (Kazemi et al. 2019): the time of day of
each reading, in seconds since midnight, is embedded as one linear and K periodic features
sin(w t + b) with learned frequencies, concatenated to the readings and fed to a GRU."""
import numpy as np
import keras
from keras import layers, ops

WINDOW = 24
PERIODIC = 8


class Time2Vec(layers.Layer):
    def __init__(self, k, **kwargs):
        super().__init__(**kwargs)
        self.k = k

    def build(self, input_shape):
        # frequencies start near one cycle per day, the period that matters for household load
        day = 2.0 * np.pi / 86400.0
        self.w0 = self.add_weight(shape=(1,), initializer=keras.initializers.Constant(day), name="w0")
        self.b0 = self.add_weight(shape=(1,), initializer="zeros", name="b0")
        self.w = self.add_weight(shape=(1, self.k), initializer=keras.initializers.RandomUniform(0.5 * day, 4.0 * day), name="w")
        self.b = self.add_weight(shape=(self.k,), initializer="zeros", name="b")

    def call(self, t):
        linear = self.w0 * t + self.b0
        periodic = ops.sin(ops.matmul(t, self.w) + self.b)
        return ops.concatenate([linear, periodic], axis=-1)


def build():
    seconds = keras.Input((WINDOW, 1), name="seconds_of_day")
    load = keras.Input((WINDOW, 2), name="load_and_temperature")
    h = layers.Concatenate()([load, Time2Vec(PERIODIC)(seconds)])
    h = layers.GRU(32)(h)
    return keras.Model([seconds, load], layers.Dense(1, dtype="float32")(h))


def make_windows(n=4096, seed=21):
    """Half-hourly readings: daily cycle plus temperature effect plus noise; predict the next reading."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 48, n)
    steps = (start[:, None] + np.arange(WINDOW + 1)[None, :]) % 48
    secs = (steps * 1800).astype("float32")
    temp = rng.normal(0.0, 1.0, (n, 1)) + 0.5 * np.sin(2 * np.pi * secs / 86400.0)
    load = np.sin(2 * np.pi * (secs - 25200) / 86400.0) + 0.3 * temp + 0.1 * rng.normal(size=secs.shape)
    x_load = np.stack([load[:, :-1], temp[:, :-1]], -1).astype("float32")
    return [secs[:, :-1, None], x_load], load[:, -1:].astype("float32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_windows()
    model = build()
    model.compile(keras.optimizers.Adam(2e-3), loss="mse")
    model.fit(x, y, batch_size=64, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
