"""A GAN step in the TensorFlow DCGAN tutorial's pattern: both losses and both gradients
are computed under two tapes, then the generator's and the discriminator's updates are
applied one after the other. Each optimizer must get its own loss."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(14)
real = (rng.normal(size=(256, 2)) * 0.5 + [2.0, -1.0]).astype("float32")
generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2, dtype="float32")])
discriminator = keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, dtype="float32")])
generator_optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
discriminator_optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
cross_entropy = keras.losses.BinaryCrossentropy(from_logits=True)


@tf.function
def train_step(images):
    noise = tf.random.normal([tf.shape(images)[0], 4])
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        generated = generator(noise, training=True)
        real_output = discriminator(images, training=True)
        fake_output = discriminator(generated, training=True)
        gen_loss = cross_entropy(tf.ones_like(fake_output), fake_output)
        disc_loss = cross_entropy(tf.ones_like(real_output), real_output) + cross_entropy(
            tf.zeros_like(fake_output), fake_output
        )
        scaled_gen = generator_optimizer.scale_loss(gen_loss)
        scaled_disc = discriminator_optimizer.scale_loss(disc_loss)
    gen_grads = gen_tape.gradient(scaled_gen, generator.trainable_variables)
    disc_grads = disc_tape.gradient(scaled_disc, discriminator.trainable_variables)
    generator_optimizer.apply_gradients(zip(gen_grads, generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(disc_grads, discriminator.trainable_variables))


for batch in tf.data.Dataset.from_tensor_slices(real).batch(32).repeat().take(args.steps):
    train_step(batch)
