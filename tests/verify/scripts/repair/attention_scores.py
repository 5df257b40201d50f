"""Self-attention whose raw scores overflow float16 (no 1/sqrt(d) scaling, large inputs).

`q @ k^T` sums 64 products of values ~40: scores pass 65504 and become inf; softmax of a
row holding inf is NaN at step 0. No static rule flags a matmul. The fix is to compute the
scores and their softmax in float32 (or the attention layer in float32).
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class SelfAttention(keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.q = keras.layers.Dense(units, use_bias=False)
        self.k = keras.layers.Dense(units, use_bias=False)
        self.v = keras.layers.Dense(units, use_bias=False)

    def call(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        weights = tf.nn.softmax(tf.matmul(q, k, transpose_b=True), axis=-1)
        return tf.matmul(weights, v)


rng = np.random.default_rng(0)
x = (rng.normal(size=(64, 8, 16)) * 400.0).astype("float32")
y = rng.normal(size=(64, 1)).astype("float32")

inputs = keras.Input((8, 16))
h = SelfAttention(64)(inputs)
h = keras.layers.GlobalAveragePooling1D()(h)
h = keras.layers.LayerNormalization()(h)
outputs = keras.layers.Dense(1, dtype="float32")(h)
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(x, y, batch_size=16, epochs=5, verbose=0)
