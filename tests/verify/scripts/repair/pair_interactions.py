"""Pairwise feature interactions (a polynomial-features layer) on raw real-estate units.

The layer forms every product x_i * x_j of the inputs as an outer product; the features are
in their raw units (floor area in square feet ~2000, lot size ~10^4), so a product is ~10^7 to
10^8: inf in float16, and the loss NaN at step 0 (a layer norm after the layer keeps float32
training). The code multiplies two reshaped views of one tensor.
The fix: the products (and the norm after them) in float32.
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class PairInteractions(keras.layers.Layer):
    def call(self, x):
        pairs = tf.expand_dims(x, 2) * tf.expand_dims(x, 1)
        return tf.reshape(pairs, [-1, x.shape[-1] * x.shape[-1]])


rng = np.random.default_rng(5)
area = rng.normal(2000.0, 500.0, size=(512, 1))
lot = rng.normal(12000.0, 3000.0, size=(512, 1))
rooms = rng.integers(1, 8, size=(512, 1))
year = rng.integers(1950, 2020, size=(512, 1))
houses = np.concatenate([area, lot, rooms, year], axis=1).astype("float32")
price = (area / 1000.0 + rooms / 4.0).astype("float32")

model = keras.Sequential([
    keras.Input((4,)),
    PairInteractions(),
    keras.layers.LayerNormalization(),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
model.fit(houses, price, batch_size=32, epochs=3, verbose=0)
