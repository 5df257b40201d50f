"""Keras 3 custom train_step with compute_loss in keras.ops; checkpoint, restore and resume training."""
import os
import tempfile

import numpy as np
import tensorflow as tf
import keras
from keras import ops

keras.mixed_precision.set_global_policy("mixed_float16")


class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(128, activation="relu")
        self.out = keras.layers.Dense(1)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x):
        return self.out(self.hidden(x))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        err = ops.subtract(y, y_pred)  # float32 targets, float16 predictions: keras.ops promotes to float32
        return ops.mean(ops.square(err))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker]


def make():
    model = Regressor()
    model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3)))
    model(np.zeros((1, 6), "float32"))
    model.optimizer.build(model.trainable_variables)  # so load_weights restores the optimizer too
    return model


rng = np.random.default_rng(13)
x = rng.normal(size=(1024, 6)).astype("float32")
y = (300.0 * np.tanh(x[:, :1]) + 20.0 * x[:, 1:2]).astype("float32")  # targets in the hundreds

model = make()
model.fit(x, y, batch_size=64, epochs=2, verbose=2)
path = os.path.join(tempfile.mkdtemp(), "ckpt.weights.h5")
model.save_weights(path)

resumed = make()
resumed.load_weights(path)
print("restored loss scale", float(resumed.optimizer.dynamic_scale))
resumed.fit(x, y, batch_size=64, epochs=2, verbose=2)
