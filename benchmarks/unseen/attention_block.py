"""Keras 3 text classifier with a hand-written self-attention block and a padding mask."""
import math

import keras
import numpy as np
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")

VOCAB, SEQ, DIM, HEADS = 1000, 32, 64, 4


class SelfAttention(layers.Layer):
    def __init__(self, dim, heads, **kwargs):
        super().__init__(**kwargs)
        self.dim, self.heads = dim, heads
        self.qkv = layers.Dense(3 * dim)
        self.out = layers.Dense(dim)

    def call(self, x, mask):
        batch = ops.shape(x)[0]
        qkv = ops.reshape(self.qkv(x), (batch, SEQ, 3, self.heads, self.dim // self.heads))
        qkv = ops.transpose(qkv, (2, 0, 3, 1, 4))
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) / math.sqrt(self.dim // self.heads)
        pad = ops.cast(mask[:, None, None, :], scores.dtype)
        scores = scores + (1.0 - pad) * -1e9
        weights = ops.softmax(scores, axis=-1)
        ctx = ops.matmul(weights, v)
        ctx = ops.reshape(ops.transpose(ctx, (0, 2, 1, 3)), (batch, SEQ, self.dim))
        return self.out(ctx)


def build():
    tokens = keras.Input((SEQ,), dtype="int32")
    mask = keras.Input((SEQ,), dtype="float32")
    h = layers.Embedding(VOCAB, DIM)(tokens)
    h = layers.LayerNormalization()(h + SelfAttention(DIM, HEADS)(h, mask))
    h = layers.GlobalAveragePooling1D()(h)
    out = layers.Dense(2, activation="softmax", dtype="float32")(h)
    return keras.Model([tokens, mask], out)


if __name__ == "__main__":
    rng = np.random.default_rng(4)
    tokens = rng.integers(1, VOCAB, size=(64, SEQ)).astype("int32")
    lengths = rng.integers(4, SEQ, size=64)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype("float32")
    labels = rng.integers(0, 2, size=64)
    model = build()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
    model.fit([tokens, mask], labels, batch_size=16, epochs=1, steps_per_epoch=4, verbose=2)
