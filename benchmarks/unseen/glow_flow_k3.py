"""Keras 3 normalising flow (RealNVP affine couplings with Glow's invertible 1x1 mixing, as dense
layers) fitted by maximum likelihood to 8-dimensional sensor readings; the model returns z and the
summed log-determinant, and compute_loss is the negative log-likelihood under a standard normal."""
import math

import numpy as np
import tensorflow as tf
import keras
from keras import ops

DIM = 8


class InvertibleDense(keras.layers.Layer):
    """Glow's invertible 1x1 convolution for vectors: z = x W, log|det dz/dx| = log|det W|."""

    def build(self, input_shape):
        d = input_shape[-1]
        q = np.linalg.qr(np.random.default_rng(d).normal(size=(d, d)))[0]
        self.w = self.add_weight(shape=(d, d), initializer=keras.initializers.Constant(q), name="w")

    def call(self, x):
        _, logdet = tf.linalg.slogdet(self.w)
        return tf.matmul(x, self.w), logdet


class AffineCoupling(keras.layers.Layer):
    def __init__(self, dim, width=64, **kwargs):
        super().__init__(**kwargs)
        self.half = dim // 2
        self.net = keras.Sequential([keras.layers.Dense(width, activation="relu"),
                                     keras.layers.Dense(width, activation="relu"),
                                     keras.layers.Dense(2 * (dim - self.half), kernel_initializer="zeros")])

    def call(self, x):
        xa, xb = x[:, :self.half], x[:, self.half:]
        log_s, t = ops.split(self.net(xa), 2, axis=-1)
        log_s = ops.tanh(log_s)
        return ops.concatenate([xa, xb * ops.exp(log_s) + t], axis=-1), ops.sum(log_s, axis=-1)


class Flow(keras.Model):
    def __init__(self, dim, steps=4, **kwargs):
        super().__init__(**kwargs)
        self.mixes = [InvertibleDense() for _ in range(steps)]
        self.couplings = [AffineCoupling(dim) for _ in range(steps)]

    def call(self, x):
        logdet = 0.0
        for mix, coupling in zip(self.mixes, self.couplings):
            x, ld_mix = mix(x)
            x, ld_cpl = coupling(x)
            logdet = logdet + ld_mix + ld_cpl
        return x, logdet

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        z, logdet = y_pred
        z, logdet = ops.cast(z, "float32"), ops.cast(logdet, "float32")
        log_pz = -0.5 * ops.sum(ops.square(z), axis=-1) - 0.5 * DIM * math.log(2 * math.pi)
        return -ops.mean(log_pz + logdet)


def make_readings(n=8192, seed=5):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, 3))
    mix = rng.normal(size=(3, DIM))
    x = np.tanh(base @ mix) + 0.3 * base[:, :1] ** 2 + 0.05 * rng.normal(size=(n, DIM))
    return ((x - x.mean(0)) / x.std(0)).astype("float32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x = make_readings()
    flow = Flow(DIM)
    flow.compile(keras.optimizers.Adam(1e-3))
    flow.fit(x, batch_size=256, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
