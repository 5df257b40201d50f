"""tf_keras deep residual MLP for tabular churn prediction with ReZero residuals (Bachlechner et al. 2020):
each block adds alpha * F(x) with a learned scalar alpha that starts at zero."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras


class ReZeroBlock(keras.layers.Layer):
    def __init__(self, width, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(width * 2, activation="gelu")
        self.outer = keras.layers.Dense(width)

    def build(self, input_shape):
        self.alpha = tf.Variable(0.0, trainable=True, name="rezero_alpha")
        super().build(input_shape)

    def call(self, x):
        return x + self.alpha * self.outer(self.inner(x))


def make_data(n=16384, seed=41):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 20)).astype("float32")
    logit = x[:, 0] * x[:, 1] - x[:, 2] + 0.5 * np.abs(x[:, 3])
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-2.0 * logit))).astype("float32")
    return x, y


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64)]
                             + [ReZeroBlock(64) for _ in range(6)]
                             + [keras.layers.Dense(1, activation="sigmoid", dtype="float32")])
    model.compile(keras.optimizers.Adam(1e-3), "binary_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=256, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
