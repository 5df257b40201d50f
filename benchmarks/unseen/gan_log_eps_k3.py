"""DCGAN-style GAN in Keras 3 with keras.ops, the classic log(D(x) + eps) losses written out."""
import numpy as np
import keras
from keras import layers, ops

keras.config.set_dtype_policy("mixed_float16")
LATENT = 32


def generator():
    return keras.Sequential(
        [
            keras.Input((LATENT,)),
            layers.Dense(7 * 7 * 32, activation="relu"),
            layers.Reshape((7, 7, 32)),
            layers.Conv2DTranspose(16, 4, strides=2, padding="same", activation="relu"),
            layers.Conv2DTranspose(1, 4, strides=2, padding="same", activation="tanh", dtype="float32"),
        ]
    )


def discriminator():
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            layers.Conv2D(16, 4, strides=2, padding="same"),
            layers.LeakyReLU(0.2),
            layers.Flatten(),
            layers.Dense(1, activation="sigmoid"),
        ]
    )


class GAN(keras.Model):
    def __init__(self):
        super().__init__()
        self.gen, self.disc = generator(), discriminator()

    def d_loss(self, real_p, fake_p):
        return -ops.mean(ops.log(real_p + 1e-8) + ops.log(1.0 - fake_p + 1e-8))

    def g_loss(self, fake_p):
        return -ops.mean(ops.log(fake_p + 1e-8))


if __name__ == "__main__":
    import tensorflow as tf

    gan = GAN()
    d_opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(2e-4, beta_1=0.5))
    g_opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(2e-4, beta_1=0.5))
    real = np.random.default_rng(6).uniform(-1, 1, size=(64, 28, 28, 1)).astype("float32")
    for step in range(3):
        noise = keras.random.normal((64, LATENT))
        with tf.GradientTape() as tape:
            d_loss = gan.d_loss(gan.disc(real, training=True), gan.disc(gan.gen(noise), training=True))
            scaled = d_opt.scale_loss(d_loss)
        grads = tape.gradient(scaled, gan.disc.trainable_variables)
        d_opt.apply_gradients(zip(grads, gan.disc.trainable_variables))
        with tf.GradientTape() as tape:
            g_loss = gan.g_loss(gan.disc(gan.gen(noise, training=True)))
            scaled = g_opt.scale_loss(g_loss)
        grads = tape.gradient(scaled, gan.gen.trainable_variables)
        g_opt.apply_gradients(zip(grads, gan.gen.trainable_variables))
        print("step", step, float(d_loss), float(g_loss))
