"""Keras 3 normalising flow: Glow's invertible 1x1 mixing (a dense layer whose log-determinant is
tf.linalg.slogdet of its kernel) between affine couplings, fitted by maximum likelihood. Under
mixed_float16 the mixing layer's kernel is float16 in `call`, and TensorFlow has no float16 kernel for
LogMatrixDeterminant: the first training step crashes; float32 trains."""
import math

import numpy as np
import tensorflow as tf
import keras
from keras import ops

DIM = 4


class InvertibleDense(keras.layers.Layer):
    def build(self, input_shape):
        d = input_shape[-1]
        q = np.linalg.qr(np.random.default_rng(d).normal(size=(d, d)))[0]
        self.w = self.add_weight(shape=(d, d), initializer=keras.initializers.Constant(q), name="w")

    def call(self, x):
        _, logdet = tf.linalg.slogdet(self.w)
        return tf.matmul(x, self.w), logdet


class Coupling(keras.layers.Layer):
    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self.half = dim // 2
        self.net = keras.layers.Dense(2 * (dim - self.half), kernel_initializer="zeros")

    def call(self, x):
        xa, xb = x[:, :self.half], x[:, self.half:]
        log_s, t = ops.split(self.net(xa), 2, axis=-1)
        log_s = ops.tanh(log_s)
        return ops.concatenate([xa, xb * ops.exp(log_s) + t], axis=-1), ops.sum(log_s, axis=-1)


class Flow(keras.Model):
    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self.mix = InvertibleDense()
        self.coupling = Coupling(dim)

    def call(self, x):
        x, ld_mix = self.mix(x)
        x, ld_cpl = self.coupling(x)
        return x, ld_mix, ld_cpl

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        z, ld_mix, ld_cpl = y_pred
        z, logdet = ops.cast(z, "float32"), ops.cast(ld_mix, "float32") + ops.cast(ld_cpl, "float32")
        log_pz = -0.5 * ops.sum(ops.square(z), axis=-1) - 0.5 * DIM * math.log(2 * math.pi)
        return -ops.mean(log_pz + logdet)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(3)
    x = np.tanh(rng.normal(size=(1024, DIM)) @ rng.normal(size=(DIM, DIM))).astype("float32")
    flow = Flow(DIM)
    flow.compile(keras.optimizers.Adam(1e-3))
    flow.fit(x, batch_size=64, epochs=1, verbose=2)


if __name__ == "__main__":
    main()
