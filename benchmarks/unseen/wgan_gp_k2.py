"""tf_keras WGAN-GP (Gulrajani et al. 2017) on a ring of eight 2-D Gaussians, custom loop with nested
tapes: the inner tape gives the critic's gradient at random interpolates, the penalty pulls its norm to
1. The critic's gradients of the two terms are taken separately (their norms are logged) and summed."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
from tensorflow import keras

GP_WEIGHT = 10.0
N_CRITIC = 5
BATCH = 256


def mlp(out_dim):
    return keras.Sequential([
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(out_dim, dtype="float32"),
    ])


def sample_ring(n, rng):
    k = rng.integers(0, 8, n)
    centres = 2.0 * np.stack([np.cos(k * np.pi / 4), np.sin(k * np.pi / 4)], -1)
    return (centres + 0.05 * rng.normal(size=(n, 2))).astype("float32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    critic, gen = mlp(1), mlp(2)
    critic.build((None, 2))
    gen.build((None, 8))
    d_opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-4, beta_1=0.5, beta_2=0.9))
    g_opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-4, beta_1=0.5, beta_2=0.9))

    @tf.function
    def critic_step(real):
        noise = tf.random.normal([BATCH, 8])
        eps = tf.random.uniform([BATCH, 1])
        with tf.GradientTape(persistent=True) as tape:
            fake = gen(noise, training=True)
            interp = eps * real + (1.0 - eps) * fake
            with tf.GradientTape() as gp_tape:
                gp_tape.watch(interp)
                d_interp = critic(interp, training=True)
            slopes = tf.norm(gp_tape.gradient(d_interp, interp), axis=1)
            gp = tf.reduce_mean(tf.square(slopes - 1.0))
            w_loss = tf.reduce_mean(critic(fake, training=True)) - tf.reduce_mean(critic(real, training=True))
            scaled_w = d_opt.get_scaled_loss(w_loss)
        w_grads = tape.gradient(scaled_w, critic.trainable_variables)
        gp_grads = tape.gradient(GP_WEIGHT * gp, critic.trainable_variables)
        # the penalty has no gradient for the output bias
        grads = d_opt.get_unscaled_gradients([a if b is None else a + b for a, b in zip(w_grads, gp_grads)])
        d_opt.apply_gradients(zip(grads, critic.trainable_variables))
        return w_loss, tf.reduce_mean(slopes)

    @tf.function
    def gen_step():
        with tf.GradientTape() as tape:
            g_loss = -tf.reduce_mean(critic(gen(tf.random.normal([BATCH, 8]), training=True), training=True))
            scaled = g_opt.get_scaled_loss(g_loss)
        grads = g_opt.get_unscaled_gradients(tape.gradient(scaled, gen.trainable_variables))
        g_opt.apply_gradients(zip(grads, gen.trainable_variables))
        return g_loss

    rng = np.random.default_rng(0)
    for it in range(1, 201):
        for _ in range(N_CRITIC):
            w_loss, slope = critic_step(tf.constant(sample_ring(BATCH, rng)))
        gen_step()
        if it % 50 == 0:
            print(f"iter {it}: wasserstein estimate {-float(w_loss):.3f}, critic slope {float(slope):.3f}", flush=True)


if __name__ == "__main__":
    main()
