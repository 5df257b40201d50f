"""tf_keras GAN on 2-D points with a hand-written training loop: the generator and the
discriminator each have their own LossScaleOptimizer and scale/unscale with it."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras

NOISE = 8


def mlp(n_in, n_out, name):
    return keras.Sequential([
        keras.Input((n_in,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(n_out, dtype="float32"),
    ], name=name)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    generator, discriminator = mlp(NOISE, 2, "generator"), mlp(2, 1, "discriminator")
    g_opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3, beta_1=0.5))
    d_opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3, beta_1=0.5))
    bce = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def train_step(real):
        noise = tf.random.normal((tf.shape(real)[0], NOISE))
        with tf.GradientTape() as d_tape:
            fake = generator(noise, training=True)
            real_logits = discriminator(real, training=True)
            fake_logits = discriminator(fake, training=True)
            d_loss = bce(tf.ones_like(real_logits), real_logits) + bce(tf.zeros_like(fake_logits), fake_logits)
            d_scaled = d_opt.get_scaled_loss(d_loss)
        d_grads = d_opt.get_unscaled_gradients(d_tape.gradient(d_scaled, discriminator.trainable_variables))
        d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
        with tf.GradientTape() as g_tape:
            fake_logits = discriminator(generator(noise, training=True), training=True)
            g_loss = bce(tf.ones_like(fake_logits), fake_logits)
            g_scaled = g_opt.get_scaled_loss(g_loss)
        g_grads = g_opt.get_unscaled_gradients(g_tape.gradient(g_scaled, generator.trainable_variables))
        g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
        return d_loss, g_loss

    rng = np.random.default_rng(0)
    angles = rng.uniform(0, 2 * np.pi, 4096)
    ring = np.stack([np.cos(angles), np.sin(angles)], axis=1) * 2.0 + 0.05 * rng.normal(size=(4096, 2))
    data = tf.data.Dataset.from_tensor_slices(ring.astype("float32")).shuffle(4096).batch(128)
    for epoch in range(3):
        d_losses, g_losses = zip(*[train_step(batch) for batch in data])
        print(f"epoch {epoch} d {np.mean(d_losses):.3f} g {np.mean(g_losses):.3f} scale {float(d_opt.loss_scale):.0f}")


if __name__ == "__main__":
    main()
