"""Keras 3 discrete-time survival model: per-interval hazards, survival curve by cumulative product."""
import numpy as np
import keras
from keras import ops

N_BINS = 120

keras.mixed_precision.set_global_policy("mixed_float16")


class DiscreteHazard(keras.Model):
    def __init__(self):
        super().__init__()
        self.body = keras.Sequential([keras.layers.Dense(64, activation="relu"), keras.layers.Dense(64, activation="relu")])
        self.hazard = keras.layers.Dense(N_BINS, activation="sigmoid")

    def call(self, x):
        return self.hazard(self.body(x))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        event_bin, observed = y[:, 0], ops.cast(y[:, 1], y_pred.dtype)
        survival = ops.cumprod(1.0 - y_pred, axis=-1)
        at_event = ops.one_hot(ops.cast(event_bin, "int32"), N_BINS, dtype=y_pred.dtype)
        surv_t = ops.sum(survival * at_event, axis=-1)
        haz_t = ops.sum(y_pred * at_event, axis=-1)
        surv_before = surv_t / (1.0 - haz_t)
        # observed event: S(t-1) * h(t); censored: S(t)
        loglik = observed * (ops.log(surv_before) + ops.log(haz_t)) + (1.0 - observed) * ops.log(surv_t)
        return -ops.mean(loglik)


rng = np.random.default_rng(17)
x = rng.normal(size=(2048, 12)).astype("float32")
risk = 1.0 / (1.0 + np.exp(-(x[:, 0] - 2.0)))
event_bin = np.minimum(rng.geometric(0.02 + 0.1 * risk) - 1, N_BINS - 1)
observed = (rng.uniform(size=2048) < 0.7).astype("float32")
y = np.stack([event_bin.astype("float32"), observed], axis=1)

model = DiscreteHazard()
model.compile(optimizer=keras.optimizers.Adam(1e-3))
model.fit(x, y, batch_size=128, epochs=4, verbose=2)
