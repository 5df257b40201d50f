"""tf_keras GAN as a Model subclass: compile(d_optimizer, g_optimizer), each a LossScaleOptimizer used in full."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")
LATENT = 16


class GAN(keras.Model):
    def __init__(self, generator, discriminator):
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator
        self.bce = keras.losses.BinaryCrossentropy(from_logits=True)

    def compile(self, d_optimizer, g_optimizer):
        super().compile()
        self.d_optimizer = keras.mixed_precision.LossScaleOptimizer(d_optimizer)
        self.g_optimizer = keras.mixed_precision.LossScaleOptimizer(g_optimizer)

    def train_step(self, real):
        batch = tf.shape(real)[0]
        noise = tf.random.normal((batch, LATENT))
        with tf.GradientTape() as tape:
            fake = self.generator(noise, training=True)
            real_logits = self.discriminator(real, training=True)
            fake_logits = self.discriminator(fake, training=True)
            d_loss = self.bce(tf.ones_like(real_logits), real_logits) + self.bce(tf.zeros_like(fake_logits), fake_logits)
            scaled_d = self.d_optimizer.get_scaled_loss(d_loss)
        d_vars = self.discriminator.trainable_variables
        d_grads = self.d_optimizer.get_unscaled_gradients(tape.gradient(scaled_d, d_vars))
        self.d_optimizer.apply_gradients(zip(d_grads, d_vars))

        with tf.GradientTape() as tape:
            fake_logits = self.discriminator(self.generator(noise, training=True), training=True)
            g_loss = self.bce(tf.ones_like(fake_logits), fake_logits)
            scaled_g = self.g_optimizer.get_scaled_loss(g_loss)
        g_vars = self.generator.trainable_variables
        g_grads = self.g_optimizer.get_unscaled_gradients(tape.gradient(scaled_g, g_vars))
        self.g_optimizer.apply_gradients(zip(g_grads, g_vars))
        return {"d_loss": d_loss, "g_loss": g_loss}


generator = keras.Sequential([
    keras.layers.Dense(64, activation="relu", input_shape=(LATENT,)),
    keras.layers.Dense(2, dtype="float32"),
])
discriminator = keras.Sequential([
    keras.layers.Dense(64, activation="relu", input_shape=(2,)),
    keras.layers.Dense(1, dtype="float32"),
])
gan = GAN(generator, discriminator)
gan.compile(keras.optimizers.Adam(2e-4, beta_1=0.5), keras.optimizers.Adam(2e-4, beta_1=0.5))
rng = np.random.default_rng(9)
angles = rng.uniform(0, 2 * np.pi, size=(4096,))
ring = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype("float32") * 2.0
history = gan.fit(tf.data.Dataset.from_tensor_slices(ring).batch(128), epochs=3, verbose=2)
print({k: [round(float(v), 3) for v in vals] for k, vals in history.history.items()})
