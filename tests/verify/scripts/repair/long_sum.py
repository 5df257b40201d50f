"""Mean pooling written as a float16 sum over a long sequence, then a division.

The per-feature sum over 4096 positions of activations ~20 passes 65504 and becomes inf
before the division brings it back into range: NaN at step 0. A plain `reduce_sum` is
no sum of squares, so no static rule flags it. The fix: sum in float32 (or
`reduce_mean`). Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class MeanPool(keras.layers.Layer):
    def call(self, h):
        return tf.reduce_sum(h, axis=1) / tf.cast(tf.shape(h)[1], h.dtype)


rng = np.random.default_rng(0)
x = (rng.normal(size=(64, 4096, 4)) + 3.0).astype("float32")
y = rng.normal(size=(64, 1)).astype("float32")

model = keras.Sequential([
    keras.Input((4096, 4)),
    keras.layers.Dense(8, activation="relu", kernel_initializer=keras.initializers.Constant(2.0)),
    MeanPool(),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
model.fit(x, y, batch_size=16, epochs=10, verbose=0)
