"""tf_keras regression with a hand-written Metric subclass (RMSE accumulated in variables)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


class RootMeanSquaredError(keras.metrics.Metric):
    def __init__(self, name="rmse", **kwargs):
        super().__init__(name=name, **kwargs)
        self.sum_sq = self.add_weight(name="sum_sq", initializer="zeros")
        self.count = self.add_weight(name="count", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        err = tf.square(y_true - y_pred)
        self.sum_sq.assign_add(tf.reduce_sum(err))
        self.count.assign_add(tf.cast(tf.size(err), self.dtype))

    def result(self):
        return tf.sqrt(self.sum_sq / self.count)

    def reset_state(self):
        self.sum_sq.assign(0.0)
        self.count.assign(0.0)


model = keras.Sequential([
    keras.layers.Dense(64, activation="relu", input_shape=(10,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(1),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", metrics=[RootMeanSquaredError()])

rng = np.random.default_rng(4)
x = rng.normal(size=(1024, 10)).astype("float32")
y = (x @ rng.normal(size=(10, 1))).astype("float32")
model.fit(x, y, batch_size=64, epochs=3, validation_split=0.2, verbose=2)
