"""Keras 3 subclassed Model: train_step with self.compute_loss, a gradient-norm metric and clipping."""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class ClippedClassifier(keras.Model):
    def __init__(self, num_classes=5, clip_norm=1.0):
        super().__init__()
        self.body = keras.Sequential([keras.layers.Dense(256, activation="relu"), keras.layers.Dense(256, activation="relu")])
        self.out = keras.layers.Dense(num_classes, dtype="float32")
        self.clip_norm = clip_norm
        self.grad_norm = keras.metrics.Mean(name="grad_norm")

    def call(self, x, training=False):
        return self.out(self.body(x, training=training))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            scaled_loss = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, self.trainable_variables)
        grads, norm = tf.clip_by_global_norm(grads, self.clip_norm)
        self.optimizer.apply(grads, self.trainable_variables)
        self.grad_norm.update_state(norm)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            elif metric.name != "grad_norm":
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


if __name__ == "__main__":
    rng = np.random.default_rng(12)
    x = rng.normal(size=(512, 20)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + 2 * (x[:, 1] > 0).astype("int32")
    model = ClippedClassifier()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(x, y, batch_size=64, epochs=2, verbose=2)
