"""Keras 2 (tf_keras) VAE with float32 latent heads, a clipped log-variance and correct loss scaling."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")
LATENT = 8


class VAE(keras.Model):
    def __init__(self):
        super().__init__()
        self.enc = keras.Sequential([keras.layers.Dense(256, activation="relu"), keras.layers.Dense(128, activation="relu")])
        self.mu = keras.layers.Dense(LATENT, dtype="float32")
        self.log_var = keras.layers.Dense(LATENT, dtype="float32")
        self.dec = keras.Sequential([keras.layers.Dense(128, activation="relu"), keras.layers.Dense(784)])
        self.out = keras.layers.Activation("sigmoid", dtype="float32")

    def call(self, x, training=False):
        h = self.enc(x, training=training)
        mu, log_var = self.mu(h), tf.clip_by_value(self.log_var(h), -10.0, 10.0)
        z = mu + tf.exp(0.5 * log_var) * tf.random.normal(tf.shape(mu))
        kl = -0.5 * tf.reduce_sum(1.0 + log_var - tf.square(mu) - tf.exp(log_var), axis=1)
        return self.out(self.dec(z, training=training)), kl


model = VAE()
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))


@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        recon, kl = model(x, training=True)
        rec = tf.reduce_sum(keras.losses.binary_crossentropy(x[..., None], recon[..., None]), axis=1)
        loss = tf.reduce_mean(rec + kl)
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
    grads, _ = tf.clip_by_global_norm(grads, 5.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


if __name__ == "__main__":
    data = np.random.default_rng(15).uniform(size=(256, 784)).astype("float32")
    for epoch in range(2):
        for batch in tf.data.Dataset.from_tensor_slices(data).batch(64):
            loss = train_step(batch)
        print("epoch", epoch, "loss", float(loss))
