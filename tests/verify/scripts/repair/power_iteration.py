"""A spectral-norm estimate by power iteration in a `tf.while_loop`, normalised only at the end.

The layer multiplies a vector by W^T W six times and divides by the vector's norm after
the loop. The kernel's largest singular value is ~8, so the vector grows ~64x per round: it
passes 65504 by the third round, inf in float16, and the estimate (and the loss) NaN at step 0.
The fix: the iteration in float32 (or the layer in float32).
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class SpectralDense(keras.layers.Layer):
    def __init__(self, units, rounds=6, **kwargs):
        super().__init__(**kwargs)
        self.units, self.rounds = units, rounds

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units),
                                      initializer=keras.initializers.RandomUniform(0.0, 0.25))

    def call(self, x):
        w = self.kernel
        v = tf.ones([self.units, 1], dtype=w.dtype)

        def body(i, v):
            return i + 1, tf.matmul(w, tf.matmul(w, v), transpose_a=True)

        _, v = tf.while_loop(lambda i, v: i < self.rounds, body, (0, v))
        sigma = tf.sqrt(tf.norm(tf.matmul(w, v)) / tf.norm(v))
        return tf.matmul(x, w) / sigma


rng = np.random.default_rng(6)
x = rng.normal(size=(256, 64)).astype("float32")
y = x[:, :2].sum(axis=1, keepdims=True).astype("float32")

model = keras.Sequential([
    keras.Input((64,)),
    SpectralDense(64),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse")
model.fit(x, y, batch_size=32, epochs=3, verbose=0)
