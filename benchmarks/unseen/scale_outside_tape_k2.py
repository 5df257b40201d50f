"""Keras 2 (TF_USE_LEGACY_KERAS=1) autoencoder, custom loop written as a reusable Trainer class."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

mp = tf.keras.mixed_precision


class Trainer:
    def __init__(self, model, lr=1e-3):
        self.model = model
        self.optimizer = mp.LossScaleOptimizer(tf.keras.optimizers.Adam(lr))
        self.loss_fn = tf.keras.losses.MeanSquaredError()

    def forward(self, batch):
        with tf.GradientTape() as tape:
            recon = self.model(batch, training=True)
            loss = self.loss_fn(batch, recon)
        return tape, loss

    @tf.function
    def train_step(self, batch):
        tape, loss = self.forward(batch)
        scaled_loss = self.optimizer.get_scaled_loss(loss)
        scaled_grads = tape.gradient(scaled_loss, self.model.trainable_variables)
        grads = self.optimizer.get_unscaled_gradients(scaled_grads)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


def autoencoder(dim=784):
    inputs = tf.keras.Input((dim,))
    code = tf.keras.layers.Dense(32, activation="relu")(inputs)
    recon = tf.keras.layers.Dense(dim, activation="sigmoid", dtype="float32")(code)
    return tf.keras.Model(inputs, recon)


if __name__ == "__main__":
    mp.set_global_policy("mixed_float16")
    data = np.random.default_rng(10).uniform(size=(256, 784)).astype("float32")
    trainer = Trainer(autoencoder())
    for batch in tf.data.Dataset.from_tensor_slices(data).batch(64):
        print("loss", float(trainer.train_step(batch)))
