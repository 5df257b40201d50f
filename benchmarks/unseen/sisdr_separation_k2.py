"""tf_keras single-channel speech enhancement (a small TasNet-like conv encoder/decoder on raw
waveforms) trained with the negative scale-invariant SDR (Le Roux et al. 2019) given to compile;
some training windows hold only noise, so their clean target is silent."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as keras

SAMPLES = 4096


def neg_si_sdr(y_true, y_pred, eps=1e-8):
    y_true = tf.squeeze(tf.cast(y_true, y_pred.dtype), -1)
    y_pred = tf.squeeze(y_pred, -1)
    y_true = y_true - tf.reduce_mean(y_true, axis=-1, keepdims=True)
    y_pred = y_pred - tf.reduce_mean(y_pred, axis=-1, keepdims=True)
    dot = tf.reduce_sum(y_true * y_pred, axis=-1, keepdims=True)
    target_energy = tf.reduce_sum(tf.square(y_true), axis=-1, keepdims=True)
    s_target = dot / (target_energy + eps) * y_true
    e_noise = y_pred - s_target
    ratio = tf.reduce_sum(tf.square(s_target), axis=-1) / (tf.reduce_sum(tf.square(e_noise), axis=-1) + eps)
    return -10.0 * tf.math.log(ratio + eps) / np.log(10.0)


def build():
    wave = keras.Input((SAMPLES, 1))
    h = keras.layers.Conv1D(32, 16, strides=8, padding="same", activation="relu")(wave)
    h = keras.layers.Conv1D(32, 3, padding="same", activation="relu")(h)
    h = keras.layers.Conv1D(32, 3, padding="same", activation="relu")(h)
    clean = keras.layers.Conv1DTranspose(1, 16, strides=8, padding="same")(h)
    return keras.Model(wave, clean)


def make_windows(n=192, seed=3, silent_fraction=0.15):
    """Harmonic 'voiced' bursts in broadband noise; a share of windows has no speech at all."""
    rng = np.random.default_rng(seed)
    t = np.arange(SAMPLES) / 8000.0
    clean = np.zeros((n, SAMPLES), "float32")
    for i in range(n):
        if rng.random() < silent_fraction:
            continue
        f0 = rng.uniform(90, 250)
        envelope = np.clip(np.sin(np.pi * t / t[-1] * rng.integers(1, 4)), 0, None)
        clean[i] = 0.1 * envelope * sum(np.sin(2 * np.pi * k * f0 * t) / k for k in range(1, 6))
    noisy = clean + 0.05 * rng.normal(size=clean.shape).astype("float32")
    return noisy[..., None], clean[..., None]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_windows()
    model = build()
    model.compile(keras.optimizers.Adam(1e-3), loss=neg_si_sdr)
    model.fit(x, y, batch_size=32, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
