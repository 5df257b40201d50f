"""A custom RNN cell that keeps a running total of the projected readings (cumulative load).

The cell's state is the sum so far of its projected input; it outputs the running mean (total
divided by the window length). Over a two-week window of hourly meter readings (336 steps,
8 channels ~30 kWh) each step adds ~240 per unit: the state passes 65504 near hour 270, inf in
float16, though the output it divides stays ~240. NaN loss at step 0.
The fix: the cell (its state) in float32 (or the RNN layer in float32).
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")
HOURS = 336


class RunningTotalCell(keras.layers.Layer):
    def __init__(self, units, steps, **kwargs):
        super().__init__(**kwargs)
        self.units, self.steps = units, steps
        self.state_size = units
        self.output_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), name="kernel",
                                      initializer=keras.initializers.RandomUniform(0.8, 1.2))

    def call(self, inputs, states):
        total = states[0] + tf.matmul(inputs, self.kernel)
        return total / float(self.steps), [total]


rng = np.random.default_rng(8)
load = rng.gamma(9.0, 3.3, size=(192, HOURS, 8)).astype("float32")
y = (load.mean(axis=(1, 2)) / 30.0).astype("float32")[:, None]

model = keras.Sequential([
    keras.Input((HOURS, 8)),
    keras.layers.RNN(RunningTotalCell(16, HOURS)),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
model.fit(load, y, batch_size=32, epochs=3, verbose=0)
