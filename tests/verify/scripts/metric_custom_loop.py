"""A custom loop (tf.keras: Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1) that reads its own Metric subclass's
result() after every step: the metric sums squared 0-255 errors over 256 sigmoid outputs in float16 (their dtype),
inf under mixed_float16 (past 65504) while the loss trains; float32 gives ~1.6e6. Test fixture of
tests/verify/test_metric_verdict.py."""
import numpy as np
import tensorflow as tf

keras = tf.keras


class Energy(keras.metrics.Metric):
    def __init__(self, name="energy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_weight(name="total", initializer="zeros")
        self.count = self.add_weight(name="count", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        energy = tf.reduce_sum(tf.square((tf.cast(y_true, y_pred.dtype) - y_pred) * 255.0), axis=-1)
        self.total.assign_add(tf.reduce_mean(tf.cast(energy, tf.float32)))
        self.count.assign_add(1.0)

    def result(self):
        return self.total / self.count


keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(5)
x = rng.normal(size=(128, 16)).astype("float32")
y = rng.uniform(size=(128, 256)).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(256, activation="sigmoid")])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
KERAS3 = hasattr(optimizer, "scale_loss")
metric = Energy()


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        pred = model(xb, training=True)
        loss = tf.reduce_mean(tf.square(yb - tf.cast(pred, tf.float32)))
        scaled = optimizer.scale_loss(loss) if KERAS3 else optimizer.get_scaled_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    if not KERAS3:
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    metric.update_state(yb, pred)
    return loss


for epoch in range(3):
    metric.reset_state()
    for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(32):
        loss = train_step(xb, yb)
        print(f"epoch {epoch} loss {float(loss):.4f} energy {float(metric.result()):.4g}")
