"""Keras 3 DCGAN-style model: compile() takes two optimizers, train_step updates both networks."""
import numpy as np
import keras
import tensorflow as tf
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")
LATENT = 64


def make_generator():
    return keras.Sequential(
        [
            keras.Input((LATENT,)),
            layers.Dense(7 * 7 * 64, activation="relu"),
            layers.Reshape((7, 7, 64)),
            layers.Conv2DTranspose(32, 4, strides=2, padding="same", activation="relu"),
            layers.Conv2DTranspose(1, 4, strides=2, padding="same", activation="tanh", dtype="float32"),
        ]
    )


def make_discriminator():
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            layers.Conv2D(32, 4, strides=2, padding="same"),
            layers.LeakyReLU(0.2),
            layers.Conv2D(64, 4, strides=2, padding="same"),
            layers.LeakyReLU(0.2),
            layers.Flatten(),
            layers.Dense(1, dtype="float32"),
        ]
    )


class GAN(keras.Model):
    def __init__(self, generator, discriminator):
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, real):
        batch = tf.shape(real)[0]
        noise = tf.random.normal((batch, LATENT))
        with tf.GradientTape() as tape:
            fake = self.generator(noise)
            logits = self.discriminator(tf.concat([fake, real], axis=0))
            labels = tf.concat([tf.ones((batch, 1)), tf.zeros((batch, 1))], axis=0)
            d_loss = self.loss_fn(labels, logits)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))

        noise = tf.random.normal((batch, LATENT))
        with tf.GradientTape() as tape:
            logits = self.discriminator(self.generator(noise))
            g_loss = self.loss_fn(tf.zeros((batch, 1)), logits)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        return {"d_loss": d_loss, "g_loss": g_loss}


if __name__ == "__main__":
    images = np.random.default_rng(0).uniform(-1, 1, size=(256, 28, 28, 1)).astype("float32")
    gan = GAN(make_generator(), make_discriminator())
    gan.compile(
        d_optimizer=keras.optimizers.Adam(2e-4, beta_1=0.5),
        g_optimizer=keras.optimizers.Adam(2e-4, beta_1=0.5),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    gan.fit(tf.data.Dataset.from_tensor_slices(images).batch(32), epochs=1, steps_per_epoch=4, verbose=2)
