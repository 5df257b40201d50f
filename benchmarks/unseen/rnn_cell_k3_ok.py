"""Keras 3 custom RNN cell (minimal GRU variant) with add_weight parameters, wrapped in keras.layers.RNN."""
import numpy as np
import tensorflow as tf
import keras
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")


class MinGRUCell(layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        dim = input_shape[-1]
        self.kernel = self.add_weight(shape=(dim, 2 * self.units), initializer="glorot_uniform", name="kernel")
        self.recurrent = self.add_weight(shape=(self.units, 2 * self.units), initializer="orthogonal", name="recurrent")
        self.bias = self.add_weight(shape=(2 * self.units,), initializer="zeros", name="bias")

    def call(self, inputs, states):
        h = states[0] if isinstance(states, (list, tuple)) else states
        z = tf.matmul(inputs, self.kernel) + tf.matmul(h, self.recurrent) + self.bias
        gate, candidate = tf.split(z, 2, axis=-1)
        gate = tf.sigmoid(gate)
        new_h = (1.0 - gate) * h + gate * tf.tanh(candidate)
        return new_h, [new_h]


def build(steps=30, features=8):
    inputs = keras.Input((steps, features))
    h = layers.RNN(MinGRUCell(64))(inputs)
    outputs = layers.Dense(1, dtype="float32")(h)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    return model


if __name__ == "__main__":
    rng = np.random.default_rng(10)
    x = rng.normal(size=(512, 30, 8)).astype("float32")
    y = x[:, :, 0].sum(axis=1, keepdims=True).astype("float32") * 0.1
    build().fit(x, y, batch_size=64, epochs=2, verbose=2)
