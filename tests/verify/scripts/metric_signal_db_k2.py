"""tf_keras: a compiled Metric subclass (signal level in dB) whose update_state sums squared 0-255 errors over 256
outputs in float16, the sigmoid head's dtype: past 65504 the sum is inf, so the metric is inf on every batch under
mixed_float16 while the loss trains; float32 gives ~60 dB. Test fixture of tests/verify/test_metric_verdict.py."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as keras


class SignalDb(keras.metrics.Metric):
    def __init__(self, name="signal_db", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_weight(name="total", initializer="zeros")
        self.count = self.add_weight(name="count", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        error = (tf.cast(y_true, y_pred.dtype) - y_pred) * 255.0
        energy = tf.reduce_sum(tf.square(error), axis=-1)
        db = 10.0 * tf.math.log(1.0 + energy) / np.log(10.0)
        self.total.assign_add(tf.reduce_sum(tf.cast(db, self.dtype)))
        self.count.assign_add(tf.cast(tf.shape(db)[0], self.dtype))

    def result(self):
        return self.total / self.count


keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(3)
x = rng.normal(size=(128, 16)).astype("float32")
y = rng.uniform(size=(128, 256)).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(256, activation="sigmoid")])
model.compile(keras.optimizers.Adam(1e-3), loss="mse", metrics=[SignalDb()])
model.fit(x, y, batch_size=32, epochs=3, verbose=0)
