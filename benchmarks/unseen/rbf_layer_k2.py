"""tf_keras normalized radial-basis-function network (Moody & Darken 1989) for boiler efficiency from 32 raw
pressure/temperature channels: Gaussian units with trainable centers (seeded by k-means++ style sampling)
and a trainable log-width, normalized to sum to one, then a linear read-out."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras


class NormalizedRBF(keras.layers.Layer):
    def __init__(self, init_centers, init_gamma, **kwargs):
        super().__init__(**kwargs)
        self.init_centers = np.asarray(init_centers, dtype="float32")
        self.init_gamma = float(init_gamma)

    def build(self, input_shape):
        self.centers = self.add_weight(
            name="centers", shape=self.init_centers.shape,
            initializer=keras.initializers.Constant(self.init_centers))
        self.log_gamma = self.add_weight(
            name="log_gamma", shape=(), initializer=keras.initializers.Constant(np.log(self.init_gamma)))
        super().build(input_shape)

    def call(self, x):
        d2 = tf.reduce_sum(tf.square(x[:, None, :] - self.centers[None, :, :]), axis=-1)
        phi = tf.exp(-tf.exp(self.log_gamma) * d2)
        return phi / tf.reduce_sum(phi, axis=-1, keepdims=True)


def make_data(n=8192, d=32, seed=9):
    rng = np.random.default_rng(seed)
    load = rng.uniform(0.2, 1.0, size=(n, 1)).astype("float32")
    x = 300.0 + 80.0 * load * rng.uniform(0.5, 1.5, size=(1, d)) + 25.0 * rng.normal(size=(n, d))
    y = 0.92 - 0.1 * (load[:, 0] - 0.6) ** 2 + 0.01 * rng.normal(size=n)
    return x.astype("float32"), y.astype("float32")[:, None]


def seed_centers(x, k=48, seed=0):
    rng = np.random.default_rng(seed)
    centers = x[rng.choice(len(x), k, replace=False)]
    d2 = ((x[:2048, None, :] - centers[None]) ** 2).sum(-1)
    return centers, 1.0 / (2.0 * np.median(d2))


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    centers, gamma = seed_centers(x)
    model = keras.Sequential([
        keras.Input((x.shape[1],)),
        NormalizedRBF(centers, gamma),
        keras.layers.Dense(1, dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(1e-2), loss="mse")
    model.fit(x, y, batch_size=256, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
