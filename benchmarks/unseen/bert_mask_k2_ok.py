"""tf_keras hand-written multi-head self-attention with a BERT-style additive padding mask."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


class SelfAttention(keras.layers.Layer):
    def __init__(self, d_model, heads, **kwargs):
        super().__init__(**kwargs)
        self.heads, self.depth = heads, d_model // heads
        self.qkv = keras.layers.Dense(3 * d_model)
        self.proj = keras.layers.Dense(d_model)

    def call(self, x, padding_mask):
        b, t = tf.shape(x)[0], tf.shape(x)[1]
        qkv = tf.reshape(self.qkv(x), (b, t, 3, self.heads, self.depth))
        q, k, v = tf.unstack(tf.transpose(qkv, (2, 0, 3, 1, 4)))
        q *= self.depth ** -0.5
        scores = tf.matmul(q, k, transpose_b=True)
        adder = (1.0 - tf.cast(padding_mask[:, None, None, :], scores.dtype)) * -10000.0
        weights = tf.nn.softmax(scores + adder, axis=-1)
        out = tf.transpose(tf.matmul(weights, v), (0, 2, 1, 3))
        return self.proj(tf.reshape(out, (b, t, self.heads * self.depth)))


tokens = keras.Input((48,), dtype="int32")
mask = keras.Input((48,), dtype="float32")
h = keras.layers.Embedding(2000, 64)(tokens)
h = keras.layers.LayerNormalization()(h + SelfAttention(64, 4)(h, mask))
pooled = keras.layers.GlobalAveragePooling1D()(h, mask=tf.cast(mask, tf.bool))
logits = keras.layers.Dense(2, dtype="float32")(pooled)
model = keras.Model([tokens, mask], logits)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

rng = np.random.default_rng(11)
lengths = rng.integers(5, 48, size=1024)
pad = (np.arange(48)[None, :] < lengths[:, None]).astype("float32")
ids = (rng.integers(1, 2000, size=(1024, 48)) * pad).astype("int32")
labels = (lengths > 24).astype("int32")
model.fit([ids, pad], labels, batch_size=64, epochs=3, verbose=2)
