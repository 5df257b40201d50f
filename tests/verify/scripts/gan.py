"""Tiny Keras 3 GAN: two optimizers per training step (discriminator, then generator),
each a LossScaleOptimizer, inside one @tf.function. ``--critic K`` updates the
discriminator K times per generator update (WGAN style)."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
parser.add_argument("--critic", type=int, default=1)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(2)
real = (rng.normal(size=(512, 2)) * 0.5 + [2.0, -1.0]).astype("float32")

generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2, dtype="float32")])
discriminator = keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, dtype="float32")])
d_opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
g_opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
bce = keras.losses.BinaryCrossentropy(from_logits=True)


@tf.function
def d_step(batch):
    noise = tf.random.normal([tf.shape(batch)[0], 4])
    with tf.GradientTape() as tape:
        fake = generator(noise, training=True)
        real_logits = discriminator(batch, training=True)
        fake_logits = discriminator(fake, training=True)
        loss = bce(tf.ones_like(real_logits), real_logits) + bce(tf.zeros_like(fake_logits), fake_logits)
        scaled = d_opt.scale_loss(loss)
    grads = tape.gradient(scaled, discriminator.trainable_variables)
    d_opt.apply_gradients(zip(grads, discriminator.trainable_variables))
    return loss


@tf.function
def g_step(batch):
    noise = tf.random.normal([tf.shape(batch)[0], 4])
    with tf.GradientTape() as tape:
        fake_logits = discriminator(generator(noise, training=True), training=True)
        loss = bce(tf.ones_like(fake_logits), fake_logits)
        scaled = g_opt.scale_loss(loss)
    grads = tape.gradient(scaled, generator.trainable_variables)
    g_opt.apply_gradients(zip(grads, generator.trainable_variables))
    return loss


dataset = tf.data.Dataset.from_tensor_slices(real).shuffle(512, seed=0).batch(32).repeat()
batches = iter(dataset)
for step in range(args.steps):
    for _ in range(args.critic):
        d_loss = d_step(next(batches))
    g_loss = g_step(next(batches))
print("d", float(d_loss), "g", float(g_loss))
