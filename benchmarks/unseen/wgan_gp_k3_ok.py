"""Keras 3 WGAN-GP on a ring of eight 2-D Gaussians, custom tf.function loop with nested tapes: the
inner tape's gradient of the critic at random interpolates is not loss-scaled (its norm is the
penalty's input); the outer loss, Wasserstein term plus penalty, is scaled once and applied once."""
import numpy as np
import tensorflow as tf
import keras

GP_WEIGHT = 10.0
N_CRITIC = 5
BATCH = 256


def mlp(out_dim):
    return keras.Sequential([
        keras.Input((8 if out_dim == 2 else 2,)),
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
    d_opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-4, beta_1=0.5, beta_2=0.9))
    g_opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-4, beta_1=0.5, beta_2=0.9))

    @tf.function
    def critic_step(real):
        eps = tf.random.uniform([BATCH, 1])
        with tf.GradientTape() as tape:
            fake = gen(tf.random.normal([BATCH, 8]), training=True)
            interp = eps * real + (1.0 - eps) * fake
            with tf.GradientTape() as gp_tape:
                gp_tape.watch(interp)
                d_interp = critic(interp, training=True)
            slopes = tf.norm(gp_tape.gradient(d_interp, interp), axis=1)
            gp = tf.reduce_mean(tf.square(slopes - 1.0))
            w_loss = tf.reduce_mean(critic(fake, training=True)) - tf.reduce_mean(critic(real, training=True))
            d_loss = w_loss + GP_WEIGHT * gp
            scaled = d_opt.scale_loss(d_loss)
        grads = tape.gradient(scaled, critic.trainable_variables)
        d_opt.apply(grads, critic.trainable_variables)
        return w_loss, tf.reduce_mean(slopes)

    @tf.function
    def gen_step():
        with tf.GradientTape() as tape:
            g_loss = -tf.reduce_mean(critic(gen(tf.random.normal([BATCH, 8]), training=True), training=True))
            scaled = g_opt.scale_loss(g_loss)
        g_opt.apply(tape.gradient(scaled, gen.trainable_variables), gen.trainable_variables)
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
