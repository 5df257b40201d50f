"""Keras 3: a model whose own train_step returns, beside the loss, the largest per-sample sum of squared 0-255
errors, computed in float16 (the sigmoid head's dtype): inf on every batch under mixed_float16 (past 65504), finite
(~4e6) under float32, while the loss trains. Test fixture of tests/verify/test_metric_verdict.py."""
import keras
import numpy as np
import tensorflow as tf


class Denoiser(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=pred)
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        error = (tf.cast(y, pred.dtype) - pred) * 255.0
        return {"loss": loss, "peak_energy": tf.reduce_max(tf.reduce_sum(tf.square(error), axis=-1))}


keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(4)
x = rng.normal(size=(128, 16)).astype("float32")
y = rng.uniform(size=(128, 256)).astype("float32")
inputs = keras.Input((16,))
hidden = keras.layers.Dense(32, activation="relu")(inputs)
model = Denoiser(inputs, keras.layers.Dense(256, activation="sigmoid")(hidden))
model.compile(keras.optimizers.Adam(1e-3), loss="mse")
model.fit(x, y, batch_size=32, epochs=3, verbose=0)
