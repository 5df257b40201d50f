"""Keras 3 multi-output demand forecaster that overrides Model.compute_loss (fit does the rest)."""
import numpy as np
import keras
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")

HORIZON = 32


class Forecaster(keras.Model):
    def __init__(self, width=128):
        super().__init__()
        self.encoder = keras.Sequential([layers.Dense(width, activation="relu"), layers.Dense(width, activation="relu")])
        self.head = layers.Dense(HORIZON)

    def call(self, x, training=False):
        return self.head(self.encoder(x, training=training))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        y = ops.cast(y, y_pred.dtype)
        sse = ops.sum(ops.square(y_pred - y))
        return sse / ops.cast(ops.size(y), sse.dtype)


if __name__ == "__main__":
    rng = np.random.default_rng(5)
    x = rng.normal(size=(512, 24)).astype("float32")
    # unit sales per day: a few hundred
    y = (300.0 + 50.0 * x[:, :1] + 20.0 * rng.normal(size=(512, HORIZON))).astype("float32")
    model = Forecaster()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    model.fit(x, y, batch_size=64, epochs=1, steps_per_epoch=4, verbose=2)
