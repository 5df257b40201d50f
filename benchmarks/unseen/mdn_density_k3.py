"""Keras 3 mixture density network (Bishop 1994) for next-hour electricity price, whose residuals are
heavy-tailed: the head emits K mixture weights, means and log-scales, and compute_loss is the Gaussian
mixture negative log-likelihood written out in keras.ops."""
import math

import numpy as np
import keras
from keras import layers, ops

K = 5


class PriceMDN(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.body = [layers.Dense(128, activation="tanh"), layers.Dense(128, activation="tanh")]
        self.head = layers.Dense(3 * K)

    def call(self, x):
        for layer in self.body:
            x = layer(x)
        return self.head(x)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        logits, mu, log_sigma = ops.split(y_pred, 3, axis=-1)
        y = ops.cast(y, mu.dtype)
        pi = ops.softmax(logits, axis=-1)
        sigma = ops.exp(log_sigma)
        z = (y - mu) / sigma
        density = ops.exp(-0.5 * ops.square(z)) / (sigma * math.sqrt(2.0 * math.pi))
        likelihood = ops.sum(pi * density, axis=-1)
        return -ops.mean(ops.log(likelihood))


def make_data(n=16384, d=12, seed=8):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype("float32")
    regime = (x[:, 0] + 0.3 * rng.normal(size=n)) > 0.8
    y = np.where(regime, 2.0 + 0.5 * x[:, 1], -0.3 + 0.2 * x[:, 2]) + 0.4 * np.clip(rng.standard_t(2.0, size=n), -15.0, 15.0)
    return x, ((y - y.mean()) / y.std()).astype("float32")[:, None]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = PriceMDN()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    model.fit(x, y, batch_size=256, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
