"""Keras 3 selective state-space forecaster (a small Mamba-like block in keras.ops) for hourly
electricity load: an input-dependent diagonal decay a_t = exp(-DT * sigmoid(W x_t + b)) and the linear
recurrence h_t = a_t h_{t-1} + u_t, computed for the whole window at once with two cumulative sums."""
import numpy as np
import keras
from keras import ops

WINDOW = 96
DT = 0.5  # the fastest decay per hour: a_t >= exp(-0.5)


class SelectiveScan(keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.in_proj = keras.layers.Dense(units)
        self.decay_proj = keras.layers.Dense(units)
        self.out_proj = keras.layers.Dense(units)

    def call(self, x):
        u = self.in_proj(x)
        log_a = -DT * ops.sigmoid(self.decay_proj(x))
        cum = ops.cumsum(log_a, axis=1)
        # h_t = sum_{s <= t} exp(cum_t - cum_s) u_s
        h = ops.exp(cum) * ops.cumsum(u * ops.exp(-cum), axis=1)
        return x + self.out_proj(ops.silu(h))


def build(features=4, width=64):
    inp = keras.Input((WINDOW, features))
    h = keras.layers.Dense(width)(inp)
    h = SelectiveScan(width)(h)
    h = keras.layers.LayerNormalization()(h)
    h = SelectiveScan(width)(h)
    out = keras.layers.Dense(1, dtype="float32")(h)
    return keras.Model(inp, out)


def make_series(hours=24 * 400, seed=4):
    rng = np.random.default_rng(seed)
    t = np.arange(hours + 1)
    load = 1.0 + 0.4 * np.sin(2 * np.pi * t / 24) + 0.2 * np.sin(2 * np.pi * t / 168) + 0.05 * rng.normal(size=t.size)
    temp = np.sin(2 * np.pi * t / (24 * 365)) + 0.1 * rng.normal(size=t.size)
    feats = np.stack([load, temp, np.sin(2 * np.pi * t / 24), np.cos(2 * np.pi * t / 24)], -1).astype("float32")
    starts = np.arange(0, hours - WINDOW, 7)
    x = np.stack([feats[s:s + WINDOW] for s in starts])
    y = np.stack([load[s + 1:s + WINDOW + 1] for s in starts])[..., None].astype("float32")
    return x, y


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_series()
    model = build()
    model.compile(keras.optimizers.Adam(1e-3), loss="mse")
    model.fit(x, y, batch_size=64, epochs=4, validation_split=0.1, verbose=2)


if __name__ == "__main__":
    main()
