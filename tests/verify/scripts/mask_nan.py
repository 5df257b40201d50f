"""Keras 3 `fit` of a tiny attention model under mixed_float16 whose padding mask uses
-1e9: in float16 that constant is -inf, and 0 * -inf = NaN at every unmasked position,
so the loss is NaN from the first step."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")
SEQ, DIM = 8, 16


class MaskedSelfAttention(keras.layers.Layer):
    def build(self, input_shape):
        self.qkv = keras.layers.Dense(3 * DIM)

    def call(self, inputs):
        x, mask = inputs
        q, k, v = tf.split(self.qkv(x), 3, axis=-1)
        scores = tf.matmul(q, k, transpose_b=True) / tf.math.sqrt(tf.cast(DIM, x.dtype))
        mask = tf.cast(mask[:, None, :], scores.dtype)
        scores = scores + (1.0 - mask) * -1e9
        return tf.matmul(tf.nn.softmax(scores, axis=-1), v)


tokens = keras.Input((SEQ, DIM))
mask = keras.Input((SEQ,))
h = MaskedSelfAttention()([tokens, mask])
out = keras.layers.Dense(1, dtype="float32")(tf.keras.layers.GlobalAveragePooling1D()(h))
model = keras.Model([tokens, mask], out)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")

rng = np.random.default_rng(4)
x = rng.normal(size=(256, SEQ, DIM)).astype("float32")
m = (np.arange(SEQ)[None, :] < rng.integers(2, SEQ, size=(256, 1))).astype("float32")
y = rng.normal(size=(256, 1)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices(((x, m), y)).batch(32).repeat()
model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0)
print("trained")
