"""Vibration windows turned into features inside the tf.data pipeline, in the model's dtype.

The input pipeline's `map` casts each raw window to the policy's compute dtype (so the model
gets what it computes in, no cast on the device) and derives per-window features: the mean,
the peak and the signal energy (sum of squares over 512 samples). The accelerometer reads
~15 (m/s^2), so the energy is ~1.2*10^5: inf in float16, and the loss is NaN at step 0.
The model code is clean; the float16 arithmetic is in the data pipeline.
The fix: the features in float32 (cast to the compute dtype after, or not at all).
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")
COMPUTE_DTYPE = keras.mixed_precision.global_policy().compute_dtype


def features(window, label):
    window = tf.cast(window, COMPUTE_DTYPE)
    mean = tf.reduce_mean(window, axis=-1, keepdims=True)
    peak = tf.reduce_max(tf.abs(window), axis=-1, keepdims=True)
    energy = tf.reduce_sum(tf.square(window), axis=-1, keepdims=True)
    return tf.concat([mean, peak, tf.sqrt(energy) / 512.0, energy / 512.0], axis=-1), label


rng = np.random.default_rng(5)
windows = (15.0 + rng.normal(0, 4, size=(320, 3, 512))).astype("float32")
labels = (windows.std(axis=-1).mean(axis=-1) > 4.0).astype("float32")

dataset = (tf.data.Dataset.from_tensor_slices((windows, labels))
           .map(features)
           .map(lambda f, y: (tf.reshape(f, [12]), y))
           .batch(32))

model = keras.Sequential([
    keras.Input((12,)),
    keras.layers.Normalization(mean=[15.0, 27.0, 0.7, 240.0] * 3, variance=[1.0, 9.0, 0.01, 400.0] * 3),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(1, activation="sigmoid", dtype="float32"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
model.fit(dataset, epochs=3, verbose=0)
