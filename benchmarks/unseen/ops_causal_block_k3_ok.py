"""Keras 3 decoder-only language model written in keras.ops: a causal self-attention block with
queries scaled before the product, a causal mask filled with -1e4, and a float32 output softmax."""
import numpy as np
import keras
from keras import ops

VOCAB = 64
LENGTH = 32
DIM = 32


class CausalSelfAttention(keras.layers.Layer):
    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self.dim = dim
        self.qkv = keras.layers.Dense(3 * dim)
        self.proj = keras.layers.Dense(dim)

    def call(self, x):
        q, k, v = ops.split(self.qkv(x), 3, axis=-1)
        q = q * (self.dim ** -0.5)
        scores = ops.matmul(q, ops.transpose(k, (0, 2, 1)))
        length = ops.shape(x)[1]
        causal = ops.tril(ops.ones((length, length), dtype="bool"))
        scores = ops.where(causal[None], scores, ops.cast(-1e4, scores.dtype))
        weights = ops.softmax(scores, axis=-1)
        return self.proj(ops.matmul(weights, v))


def build_model():
    tokens = keras.Input((LENGTH,), dtype="int32")
    h = keras.layers.Embedding(VOCAB, DIM)(tokens)
    h = h + CausalSelfAttention(DIM)(keras.layers.LayerNormalization()(h))
    h = h + keras.layers.Dense(DIM, activation="gelu")(keras.layers.LayerNormalization()(h))
    logits = keras.layers.Dense(VOCAB)(h)
    outputs = keras.layers.Activation("softmax", dtype="float32")(logits)
    return keras.Model(tokens, outputs)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(3)
    start = rng.integers(0, VOCAB, (1024, 1))
    seq = (start + np.arange(LENGTH + 1)[None, :] * rng.integers(1, 4, (1024, 1))) % VOCAB
    model = build_model()
    model.compile(keras.optimizers.AdamW(3e-3), "sparse_categorical_crossentropy")
    model.fit(seq[:, :-1], seq[:, 1:], batch_size=64, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
