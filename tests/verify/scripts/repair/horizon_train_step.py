"""A multi-horizon demand forecaster whose Model.train_step computes its own loss.

The subclassed model overrides `train_step` (loss scaling handled for both Keras generations)
and sums the squared error over a 48-step horizon before averaging over the batch. To avoid a
cast it brings the targets to the predictions' dtype: float16 under the mixed policy. Demand
is ~60 units per step, so the first predictions are off by ~60 per horizon step and the sum
over 48 steps is ~1.7*10^5: inf in float16 at step 0 (and every step after).
The fix: the loss in float32 (cast the predictions, not the targets).
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")
HORIZON = 48


class Forecaster(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(64, activation="relu")
        self.head = keras.layers.Dense(HORIZON)

    def call(self, x):
        return self.head(self.hidden(x))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            y = tf.cast(y, pred.dtype)
            loss = tf.reduce_mean(tf.reduce_sum(tf.square(y - pred), axis=-1))
            if hasattr(self.optimizer, "get_scaled_loss"):  # tf_keras LossScaleOptimizer
                target = self.optimizer.get_scaled_loss(loss)
            elif hasattr(self.optimizer, "scale_loss"):  # Keras 3 (a no-op without loss scaling)
                target = self.optimizer.scale_loss(loss)
            else:
                target = loss
        grads = tape.gradient(target, self.trainable_variables)
        if hasattr(self.optimizer, "get_unscaled_gradients"):
            grads = self.optimizer.get_unscaled_gradients(grads)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


rng = np.random.default_rng(11)
history = rng.gamma(6.0, 10.0, size=(384, 24)).astype("float32")
x = history / 60.0
y = np.repeat(history.mean(axis=1, keepdims=True), HORIZON, axis=1) + rng.normal(0, 3, (384, HORIZON))
y = y.astype("float32")

model = Forecaster()
model.compile(optimizer=keras.optimizers.Adam(1e-2))
model.fit(x, y, batch_size=32, epochs=3, verbose=0)
