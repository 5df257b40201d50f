"""Keras 3 Poisson regression on event counts: the model predicts a rate, the loss is the Poisson NLL."""
import numpy as np
import keras
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")


class RateModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = [layers.Dense(128, activation="relu"), layers.Dense(128, activation="relu")]
        self.log_rate = layers.Dense(1)

    def call(self, x):
        for layer in self.hidden:
            x = layer(x)
        return ops.exp(self.log_rate(x))


def poisson_nll(y_true, rate):
    return ops.mean(rate - y_true * ops.log(rate + 1e-6))


if __name__ == "__main__":
    rng = np.random.default_rng(8)
    x = rng.normal(size=(2048, 10)).astype("float32")
    counts = rng.poisson(np.exp(9.0 + 1.5 * x[:, :1])).astype("float32")
    model = RateModel()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=poisson_nll)
    model.fit(x, counts, batch_size=128, epochs=4, verbose=2)
