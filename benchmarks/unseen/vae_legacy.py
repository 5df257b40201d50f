"""Variational autoencoder on Keras 2 selected through TF_USE_LEGACY_KERAS, custom loop."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.keras.mixed_precision.set_global_policy("mixed_float16")
LATENT = 8


class Encoder(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(128, activation="relu")
        self.mean = tf.keras.layers.Dense(LATENT)
        self.log_var = tf.keras.layers.Dense(LATENT)

    def call(self, x):
        h = self.hidden(x)
        return self.mean(h), self.log_var(h)


encoder = Encoder()
decoder = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(784)])
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))


def reparameterize(mean, log_var):
    eps = tf.random.normal(shape=tf.shape(mean))
    return mean + tf.exp(0.5 * log_var) * eps


@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        mean, log_var = encoder(x)
        z = reparameterize(mean, log_var)
        logits = tf.cast(decoder(z), tf.float32)
        recon = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=x, logits=logits), axis=1)
        kl = -0.5 * tf.reduce_sum(1.0 + log_var - tf.square(mean) - tf.exp(log_var), axis=1)
        loss = tf.reduce_mean(recon + tf.cast(kl, tf.float32))
        scaled = optimizer.get_scaled_loss(loss)
    variables = encoder.trainable_variables + decoder.trainable_variables
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, variables))
    optimizer.apply_gradients(zip(grads, variables))
    return loss


if __name__ == "__main__":
    data = (np.random.default_rng(5).uniform(size=(256, 784)) > 0.5).astype("float32")
    for step, batch in enumerate(tf.data.Dataset.from_tensor_slices(data).batch(32).take(8)):
        print(step, float(train_step(batch)))
