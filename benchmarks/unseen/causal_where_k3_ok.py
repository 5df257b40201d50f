"""Keras 3 decoder-only language model block with a hand-written causal mask applied by tf.where."""
import numpy as np
import tensorflow as tf
import keras
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")
VOCAB, SEQ, DIM, HEADS = 512, 64, 128, 4


class CausalSelfAttention(layers.Layer):
    def __init__(self, dim, heads, **kwargs):
        super().__init__(**kwargs)
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = layers.Dense(3 * dim)
        self.proj = layers.Dense(dim)

    def call(self, x):
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        qkv = tf.reshape(self.qkv(x), (batch, length, 3, self.heads, self.head_dim))
        q, k, v = tf.unstack(tf.transpose(qkv, (2, 0, 3, 1, 4)))
        q = q * tf.cast(self.head_dim**-0.5, q.dtype)
        scores = tf.matmul(q, k, transpose_b=True)
        causal = tf.linalg.band_part(tf.ones((length, length), tf.bool), -1, 0)
        scores = tf.where(causal, scores, -1e9)
        weights = tf.nn.softmax(scores, axis=-1)
        out = tf.transpose(tf.matmul(weights, v), (0, 2, 1, 3))
        return self.proj(tf.reshape(out, (batch, length, self.heads * self.head_dim)))


def build():
    tokens = keras.Input((SEQ,), dtype="int32")
    h = layers.Embedding(VOCAB, DIM)(tokens)
    h = h + CausalSelfAttention(DIM, HEADS)(layers.LayerNormalization()(h))
    h = h + layers.Dense(DIM)(layers.Dense(4 * DIM, activation="gelu")(layers.LayerNormalization()(h)))
    logits = layers.Dense(VOCAB, dtype="float32")(layers.LayerNormalization()(h))
    return keras.Model(tokens, logits)


if __name__ == "__main__":
    rng = np.random.default_rng(5)
    data = rng.integers(0, VOCAB, size=(128, SEQ + 1)).astype("int32")
    model = build()
    model.compile(optimizer=keras.optimizers.AdamW(3e-4), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(data[:, :-1], data[:, 1:], batch_size=16, epochs=1, verbose=2)
