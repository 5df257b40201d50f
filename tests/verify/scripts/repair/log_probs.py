"""Log-probabilities taken as `log(softmax(logits))` in float16.

With logits spread over more than ~17, the smallest probabilities underflow to 0 in
float16 and their log is -inf; `labels * log_probs` is then 0 * -inf = NaN at step 0.
No static rule looks inside this layer. The fix: the softmax and its log in float32
(or `tf.nn.log_softmax`). Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class LogProbs(keras.layers.Layer):
    def __init__(self, classes, **kwargs):
        super().__init__(**kwargs)
        self.logits = keras.layers.Dense(classes)

    def call(self, h):
        logits = self.logits(h)
        return tf.math.log(tf.nn.softmax(logits, axis=-1))


def nll(labels, log_probs):
    return -tf.reduce_sum(tf.cast(labels, tf.float32) * tf.cast(log_probs, tf.float32), axis=-1)


rng = np.random.default_rng(0)
x = (rng.normal(size=(128, 16)) * 4.0).astype("float32")
labels = np.eye(10, dtype="float32")[rng.integers(0, 10, size=128)]

model = keras.Sequential([keras.Input((16,)), LogProbs(10)])
model.compile(optimizer=keras.optimizers.SGD(1e-3), loss=nll)
model.fit(x, labels, batch_size=16, epochs=10, verbose=0)
