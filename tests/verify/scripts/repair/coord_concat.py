"""CoordConv in Keras 3: a layer concatenates float32 coordinates (`tf.linspace`) with its
float16 input, and TensorFlow never promotes: the model fails while it is built
("Tensors in list passed to 'values' of 'ConcatV2' Op have types [float16, float32]").
The fix a person writes, as MP206 says: the coordinates in the layer's compute dtype.
"""

import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class AddCoords(keras.layers.Layer):
    def call(self, x):
        batch, height, width = tf.shape(x)[0], tf.shape(x)[1], tf.shape(x)[2]
        ys = tf.linspace(-1.0, 1.0, height)
        xs = tf.linspace(-1.0, 1.0, width)
        grid = tf.stack(tf.meshgrid(ys, xs, indexing="ij"), axis=-1)
        grid = tf.tile(grid[None], [batch, 1, 1, 1])
        return tf.concat([x, grid], axis=-1)


model = keras.Sequential([
    keras.Input((16, 16, 3)),
    keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
    AddCoords(),
    keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer="adam", loss="mse")
x = np.random.rand(64, 16, 16, 3).astype("float32")
y = np.random.rand(64, 1).astype("float32")
model.fit(x, y, batch_size=16, epochs=2, verbose=0)
