"""An RMS normalisation whose square is written as `tf.pow(x, 2)`.

Activations ~300 square to ~90000, past float16's 65504: the mean square is inf, rsqrt
gives 0 and the gradients are NaN, so every step is skipped. MP203 knows `tf.square` and
`l2_loss`, not a power of two. The fix: the normalisation in float32.
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class RMSNorm(keras.layers.Layer):
    def call(self, x):
        variance = tf.reduce_mean(tf.pow(x, 2), axis=-1, keepdims=True)
        return x * tf.math.rsqrt(variance + 1e-3)


rng = np.random.default_rng(0)
x = (rng.normal(size=(128, 16)) * 300.0).astype("float32")
y = (x[:, :1] / 300.0).astype("float32")

model = keras.Sequential([
    keras.Input((16,)),
    RMSNorm(),
    keras.layers.Dense(16, activation="tanh"),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
model.fit(x, y, batch_size=16, epochs=10, verbose=0)
