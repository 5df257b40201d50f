"""Keras 3 substation-load forecaster on raw kW readings (~180 kW): each 96-step window is normalised by a
one-pass layer norm (mean and mean of squares in one sweep, written with keras.ops), then an MLP."""
import numpy as np
import keras
from keras import ops

WINDOW = 96


class OnePassLayerNorm(keras.layers.Layer):
    def __init__(self, epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.gamma = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="gamma")
        self.beta = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="beta")

    def call(self, x):
        mean = ops.mean(x, axis=-1, keepdims=True)
        mean_sq = ops.mean(ops.square(x), axis=-1, keepdims=True)
        variance = mean_sq - ops.square(mean)
        return (x - mean) * ops.rsqrt(variance + self.epsilon) * self.gamma + self.beta


def make_data(n=8192, seed=31):
    rng = np.random.default_rng(seed)
    t = np.arange(WINDOW + 1)[None, :] + rng.integers(0, 10000, (n, 1))
    base = rng.uniform(170.0, 190.0, (n, 1))
    load = base + 3.0 * np.sin(2 * np.pi * t / 96.0) + rng.normal(0.0, 0.5, (n, WINDOW + 1))
    x = load[:, :WINDOW].astype("float32")
    y = ((load[:, WINDOW] - load[:, :WINDOW].mean(axis=1)) / 3.0).astype("float32")
    return x, y


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = keras.Sequential([
        keras.Input((WINDOW,)),
        OnePassLayerNorm(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    model.fit(x, y, batch_size=128, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
