"""A leaky integrator over a long sequence, written as a `tf.scan` recurrence.

Each step keeps 0.999 of the state and adds the input; the state is divided by the
integrator's gain (1000) only after the scan. With readings ~100 per step the state passes
65504 after ~1100 of the 2048 steps: inf, and the loss NaN at step 0. Nothing in the code
says how large the readings are. The fix: the recurrence in float32.
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")
DECAY = 0.999


class LeakyIntegrator(keras.layers.Layer):
    def call(self, x):
        steps = tf.transpose(x, [1, 0, 2])
        states = tf.scan(lambda state, step: DECAY * state + step, steps, initializer=tf.zeros_like(steps[0]))
        return states[-1] * (1.0 - DECAY)


rng = np.random.default_rng(4)
readings = rng.gamma(20.0, 5.0, size=(64, 2048, 3)).astype("float32")
target = readings[:, -500:, :1].mean(axis=1) / 100.0

model = keras.Sequential([
    keras.Input((2048, 3)),
    LeakyIntegrator(),
    keras.layers.Dense(8, activation="relu"),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
model.fit(readings, target, batch_size=16, epochs=3, verbose=0)
