"""A sparsity penalty on a wide layer's activations, given as a plain function.

Keras calls the `activity_regularizer` on the layer's output in the layer's compute dtype:
the L1 sum over a batch of 16 x 2048 ReLU activations ~7 is ~2*10^5, inf in float16. tf_keras
adds it to the loss (inf from the first step); Keras 3 refuses to add a float16 penalty to its
float32 losses (TypeError). The function is not called by the script's own code.
The fix: the penalty in float32 (or that layer in float32).
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")


def sparsity(activations):
    return 1e-6 * tf.reduce_sum(tf.abs(activations))


rng = np.random.default_rng(7)
x = rng.normal(size=(256, 32)).astype("float32")
y = (x[:, :4].sum(axis=1, keepdims=True) > 0).astype("float32")

model = keras.Sequential([
    keras.Input((32,)),
    keras.layers.Dense(2048, activation="relu", activity_regularizer=sparsity,
                       kernel_initializer=keras.initializers.RandomUniform(0.0, 1.5)),
    keras.layers.Dense(1, activation="sigmoid", dtype="float32"),
])
model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="binary_crossentropy")
model.fit(x, y, batch_size=16, epochs=3, verbose=0)
