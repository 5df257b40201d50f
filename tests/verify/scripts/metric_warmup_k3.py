"""Keras 3, correct: a train_step that logs the global norm of the (scaled) gradients. Targets near 30 make the
first scaled gradients overflow float16 at the initial loss scale 32768: the scaler skips its warm-up steps, whose
logged norm is inf, and then trains; the float32 baseline's norm is finite. Not a metric failure: the scaler's
designed overflow handling. Test fixture of tests/verify/test_metric_verdict.py."""
import keras
import numpy as np
import tensorflow as tf


class Regressor(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        return {"loss": loss, "grad_norm": tf.linalg.global_norm(grads)}


keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(15)
x = rng.normal(size=(512, 8)).astype("float32")
y = (30.0 + x @ rng.normal(size=(8, 1))).astype("float32")
inputs = keras.Input((8,))
hidden = keras.layers.Dense(16, activation="relu")(inputs)
model = Regressor(inputs, keras.layers.Dense(1, dtype="float32")(hidden))
model.compile(keras.optimizers.SGD(0.2, global_clipnorm=1.0), loss="mse")
model.fit(x, y, batch_size=64, epochs=3, verbose=0)
