"""Deep & Cross Network (Keras 3 fit) on raw count features (clicks, views: ~100s).

A cross layer computes x0 * (x_l . w) + b + x_l; the dot product of 64 counts with weights ~1 is
~5000 and times x0 ~80 is ~4*10^5: inf in float16, and the loss NaN (the layer norm after the
cross layers keeps float32 training). Nothing in the code says the features are unnormalised counts.
"""
import numpy as np
import keras
from keras import ops

keras.mixed_precision.set_global_policy("mixed_float16")


class Cross(keras.layers.Layer):
    def build(self, input_shape):
        dim = input_shape[0][-1]
        self.w = self.add_weight(shape=(dim, 1), initializer=keras.initializers.RandomUniform(0.5, 1.5))
        self.b = self.add_weight(shape=(dim,), initializer="zeros")

    def call(self, inputs):
        x0, xl = inputs
        return x0 * ops.matmul(xl, ops.cast(self.w, xl.dtype)) + ops.cast(self.b, xl.dtype) + xl


rng = np.random.default_rng(9)
counts = rng.poisson(80.0, size=(512, 64)).astype("float32")
clicked = (counts[:, 0] > 80).astype("float32")[:, None]

inputs = keras.Input((64,))
x1 = Cross()([inputs, inputs])
x2 = Cross()([inputs, x1])
hidden = keras.layers.Dense(32, activation="relu")(keras.layers.LayerNormalization()(x2))
output = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(hidden)
model = keras.Model(inputs, output)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
model.fit(counts, clicked, batch_size=64, epochs=3, verbose=0)
