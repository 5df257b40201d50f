"""Attention pooling whose sharpness comes from a config file (pool_config.json).

The scores are divided by a temperature read at run time; the config sets 0.002 (a near-hard
max), so scores ~100 become ~5*10^4 to 10^5: inf in float16 and the softmax over a row with
inf is NaN at step 0. The code only shows a division by a number from a file.
The fix: the scores and their softmax in float32 (or the pooling layer in float32).
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import json
import os

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pool_config.json"), encoding="utf-8") as f:
    CONFIG = json.load(f)


class AttentionPool(keras.layers.Layer):
    def __init__(self, temperature, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature
        self.score = keras.layers.Dense(1, use_bias=False,
                                        kernel_initializer=keras.initializers.RandomUniform(0.5, 1.5))

    def call(self, x):
        weights = tf.nn.softmax(self.score(x) / self.temperature, axis=1)
        return tf.reduce_sum(weights * x, axis=1)


rng = np.random.default_rng(2)
x = rng.gamma(9.0, 1.0, size=(128, 16, 12)).astype("float32")
y = x.max(axis=1)[:, :1] / 10.0

model = keras.Sequential([
    keras.Input((16, 12)),
    AttentionPool(CONFIG["temperature"]),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
model.fit(x, y, batch_size=16, epochs=3, verbose=0)
