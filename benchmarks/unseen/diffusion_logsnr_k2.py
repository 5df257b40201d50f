"""tf_keras denoising diffusion model (DDPM, linear beta schedule, T = 1000) on 8x8 glyph patches: the
noising is a layer of the functional model, and the denoiser is conditioned on the log signal-to-noise
ratio of the sampled timestep, as in continuous-time variants (Kingma et al. 2021)."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras

T = 1000


def linear_schedule(steps=T, beta_start=1e-4, beta_end=0.02):
    betas = np.linspace(beta_start, beta_end, steps, dtype="float64")
    return np.cumprod(1.0 - betas).astype("float32")


class ForwardDiffusion(keras.layers.Layer):
    """x_t = sqrt(alpha_bar) * x0 + sqrt(1 - alpha_bar) * eps, and the log-SNR of t."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.alpha_bar = tf.constant(linear_schedule())

    def call(self, x0, t, eps):
        ab = tf.cast(tf.gather(self.alpha_bar, t), x0.dtype)
        eps = tf.cast(eps, x0.dtype)
        x_t = tf.sqrt(ab) * x0 + tf.sqrt(1.0 - ab) * eps
        logsnr = tf.math.log(ab) - tf.math.log(1.0 - ab)
        return x_t, logsnr


def build(dim=64, width=256):
    x0 = keras.Input((dim,), name="x0")
    t = keras.Input((1,), dtype="int32", name="t")
    eps = keras.Input((dim,), name="eps")
    x_t, logsnr = ForwardDiffusion()(x0, t, eps)
    h = keras.layers.Concatenate()([x_t, logsnr / 10.0])
    for _ in range(3):
        h = keras.layers.Dense(width, activation="swish")(h)
    eps_hat = keras.layers.Dense(dim, dtype="float32")(h)
    return keras.Model([x0, t, eps], eps_hat)


def make_data(n=8192, seed=3):
    rng = np.random.default_rng(seed)
    glyphs = (rng.uniform(size=(16, 64)) > 0.6).astype("float32") * 2.0 - 1.0
    x0 = glyphs[rng.integers(0, 16, n)] + 0.05 * rng.normal(size=(n, 64)).astype("float32")
    t = rng.integers(0, T, size=(n, 1)).astype("int32")
    eps = rng.normal(size=(n, 64)).astype("float32")
    return x0, t, eps


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x0, t, eps = make_data()
    model = build()
    model.compile(keras.optimizers.Adam(2e-4), loss="mse")
    model.fit([x0, t, eps], eps, batch_size=256, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
