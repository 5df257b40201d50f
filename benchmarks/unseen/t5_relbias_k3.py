"""Keras 3 sequence classifier with a T5-style self-attention block: no absolute positions, a learned
bias per (log-bucketed relative distance, head) added to the attention logits. The bucket table is
an Embedding kept in float32, as T5 keeps its position-bias table."""
import math

import numpy as np
import tensorflow as tf
import keras

VOCAB = 64
LENGTH = 48
HEADS = 4
KEY_DIM = 16


def relative_buckets(length, num_buckets=32, max_distance=128):
    """T5's bidirectional bucketing: exact buckets for short distances, log-spaced beyond."""
    pos = tf.range(length)
    rel = pos[None, :] - pos[:, None]
    half = num_buckets // 2
    sign = tf.cast(rel > 0, tf.int32) * half
    rel = tf.abs(rel)
    max_exact = half // 2
    large = max_exact + tf.cast(
        tf.math.log(tf.cast(tf.maximum(rel, 1), tf.float32) / max_exact)
        / math.log(max_distance / max_exact) * (half - max_exact), tf.int32)
    large = tf.minimum(large, half - 1)
    return sign + tf.where(rel < max_exact, rel, large)


class RelativeSelfAttention(keras.layers.Layer):
    def __init__(self, heads, key_dim, num_buckets=32, **kwargs):
        super().__init__(**kwargs)
        self.heads, self.key_dim, self.num_buckets = heads, key_dim, num_buckets
        self.qkv = keras.layers.Dense(3 * heads * key_dim, use_bias=False)
        self.proj = keras.layers.Dense(heads * key_dim)
        self.rel_bias = keras.layers.Embedding(num_buckets, heads, dtype="float32")

    def call(self, x):
        length = tf.shape(x)[1]
        q, k, v = tf.split(self.qkv(x), 3, axis=-1)
        q, k, v = (tf.reshape(t, [-1, length, self.heads, self.key_dim]) for t in (q, k, v))
        scores = tf.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.key_dim)
        bias = self.rel_bias(relative_buckets(length, self.num_buckets))
        scores = scores + tf.transpose(bias, [2, 0, 1])[None]
        weights = tf.nn.softmax(scores, axis=-1)
        out = tf.einsum("bhqk,bkhd->bqhd", weights, v)
        return self.proj(tf.reshape(out, [-1, length, self.heads * self.key_dim]))


def build():
    tokens = keras.Input((LENGTH,), dtype="int32")
    h = keras.layers.Embedding(VOCAB, HEADS * KEY_DIM)(tokens)
    h = keras.layers.LayerNormalization()(h + RelativeSelfAttention(HEADS, KEY_DIM)(h))
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(tokens, keras.layers.Dense(2, activation="softmax", dtype="float32")(h))


def make_data(n=2048, seed=6):
    """Label 1 when token 7 is followed, three positions later, by token 9."""
    rng = np.random.default_rng(seed)
    x = rng.integers(10, VOCAB, size=(n, LENGTH))
    y = rng.integers(0, 2, size=n)
    for i in range(n):
        p = rng.integers(0, LENGTH - 3)
        x[i, p] = 7
        x[i, p + 3] = 9 if y[i] else rng.integers(10, VOCAB)
    return x.astype("int32"), y.astype("int32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = build()
    model.compile(keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
