"""tf_keras sparse autoencoder: a custom layer adds an L2 activity penalty with add_loss."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


class PenalizedDense(keras.layers.Layer):
    def __init__(self, units, penalty=1e-4, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(units, activation="relu")
        self.penalty = penalty

    def call(self, inputs):
        h = self.dense(inputs)
        self.add_loss(self.penalty * tf.nn.l2_loss(h))
        return h


inputs = keras.Input((784,))
code = PenalizedDense(512)(inputs)
code = PenalizedDense(256)(code)
recon = keras.layers.Dense(784, dtype="float32")(code)
model = keras.Model(inputs, recon)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")

rng = np.random.default_rng(2)
x = rng.uniform(0, 255, size=(1024, 784)).astype("float32")  # raw pixel intensities
model.fit(x, x, batch_size=256, epochs=3, verbose=2)
