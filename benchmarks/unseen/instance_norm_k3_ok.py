"""Keras 3 style-transfer style net with a hand-written instance normalisation (tf.nn.moments)."""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class InstanceNorm(keras.layers.Layer):
    def __init__(self, epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.gamma = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="gamma")
        self.beta = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="beta")

    def call(self, x):
        mean, variance = tf.nn.moments(x, axes=[1, 2], keepdims=True)
        return self.gamma * (x - mean) * tf.math.rsqrt(variance + self.epsilon) + self.beta


def block(x, filters):
    x = keras.layers.Conv2D(filters, 3, padding="same")(x)
    x = InstanceNorm()(x)
    return keras.layers.Activation("relu")(x)


inputs = keras.Input((64, 64, 3))
h = keras.layers.Rescaling(1.0 / 255)(inputs)
h = block(h, 32)
h = block(h, 32)
out = keras.layers.Conv2D(3, 3, padding="same", activation="sigmoid", dtype="float32")(h)
model = keras.Model(inputs, out)
model.compile(optimizer=keras.optimizers.Adam(2e-3), loss="mae")

rng = np.random.default_rng(6)
images = rng.uniform(0, 255, size=(256, 64, 64, 3)).astype("float32")
targets = (images[..., ::-1] / 255.0).astype("float32")
model.fit(images, targets, batch_size=32, epochs=2, verbose=2)
