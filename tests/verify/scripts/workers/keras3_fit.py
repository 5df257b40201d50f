"""TensorFlow's multi-worker Keras tutorial, in short: `model.fit` on a dataset under
MultiWorkerMirroredStrategy (fails in Keras 3 before its first step, keras-team/keras#20585)."""

import numpy as np
import tensorflow as tf

import keras

keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1, dtype="float32")])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")

x = np.random.rand(128, 8).astype("float32")
y = x.sum(axis=1, keepdims=True).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
model.fit(dataset, epochs=1, steps_per_epoch=4, verbose=0)
