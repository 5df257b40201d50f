"""A correct script (tf.keras: Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1) whose compiled Metric subclass has
a tensor-dependent Python `if` in result(): tf_keras converts result() with autograph inside fit's graph, and verify's
wrapper of result() must leave that conversion to the caller's status. Test fixture of test_metric_verdict.py."""
import numpy as np, tensorflow as tf
keras = tf.keras
class Frac(keras.metrics.Metric):
    def __init__(self, name="frac", **kw):
        super().__init__(name=name, **kw)
        self.total = self.add_weight(name="total", initializer="zeros")
    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign_add(tf.reduce_mean(tf.cast(y_pred, tf.float32)))
    def result(self):
        if self.total > 1e9:  # a tensor-dependent Python `if`: needs autograph in a graph
            return self.total * 0.0
        return self.total
keras.mixed_precision.set_global_policy("mixed_float16")
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32"); y = np.ones((64, 1), "float32")
m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid", dtype="float32")])
m.compile("adam", "mse", metrics=[Frac()])
m.fit(x, y, batch_size=16, epochs=2, verbose=0)
