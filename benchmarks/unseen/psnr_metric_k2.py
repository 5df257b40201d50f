"""tf_keras image denoiser (a small residual conv net, DnCNN-like) with a hand-written PSNR Metric
subclass reporting peak signal-to-noise ratio on the 8-bit scale, as restoration papers tabulate it;
the model's sigmoid output layer follows the global mixed policy."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as keras

SIZE = 32


class PSNR(keras.metrics.Metric):
    """Mean per-image PSNR in dB, for images in [0, 1] scaled to [0, 255]."""

    def __init__(self, name="psnr", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_weight(name="total", initializer="zeros")
        self.count = self.add_weight(name="count", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tf.cast(y_true, y_pred.dtype) * 255.0
        y_pred = y_pred * 255.0
        mse = tf.reduce_mean(tf.square(y_true - y_pred), axis=[1, 2, 3])
        psnr = 10.0 * tf.math.log(255.0 ** 2 / mse) / np.log(10.0)
        self.total.assign_add(tf.reduce_sum(tf.cast(psnr, self.dtype)))
        self.count.assign_add(tf.cast(tf.shape(psnr)[0], self.dtype))

    def result(self):
        return self.total / self.count

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)


def build():
    noisy = keras.Input((SIZE, SIZE, 3))
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(noisy)
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(h)
    residual = keras.layers.Conv2D(3, 3, padding="same")(h)
    clean = keras.layers.Activation("sigmoid")(keras.layers.Add()([noisy, residual]))
    return keras.Model(noisy, clean)


def make_images(n=160, seed=9):
    """Smooth colour gradients with a few flat rectangles, plus Gaussian noise (sigma 25/255)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:SIZE, :SIZE] / SIZE
    clean = np.empty((n, SIZE, SIZE, 3), "float32")
    for i in range(n):
        a, b, c = rng.uniform(0.2, 0.8, (3, 3))
        clean[i] = a * xx[..., None] + b * yy[..., None] * (1 - a) + 0.1 * c
        for _ in range(3):
            y0, x0 = rng.integers(0, SIZE - 8, 2)
            clean[i, y0:y0 + 8, x0:x0 + 8] = rng.uniform(0.1, 0.9, 3)
    clean = np.clip(clean, 0.0, 1.0)
    noisy = clean + rng.normal(0.0, 25.0 / 255.0, clean.shape).astype("float32")
    return noisy, clean


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_images()
    model = build()
    model.compile(keras.optimizers.Adam(1e-3), loss="mae", metrics=[PSNR()])
    model.fit(x, y, batch_size=32, epochs=3, validation_split=0.2, verbose=2)


if __name__ == "__main__":
    main()
