"""Review classifier: token embeddings, one self-attention block with a padding mask, mean pooling.

Settings (and the precision policy) come from w9_settings."""
import numpy as np
import tensorflow as tf
import keras

from w9_settings import HPARAMS


class MaskedSelfAttention(keras.layers.Layer):
    def __init__(self, dim, heads, **kwargs):
        super().__init__(**kwargs)
        self.dim, self.heads = dim, heads
        self.qkv = keras.layers.Dense(3 * dim)
        self.out = keras.layers.Dense(dim)

    def call(self, x, pad_mask):
        b, t = tf.shape(x)[0], tf.shape(x)[1]
        q, k, v = tf.split(self.qkv(x), 3, axis=-1)

        def heads(z):
            z = tf.reshape(z, [b, t, self.heads, self.dim // self.heads])
            return tf.transpose(z, [0, 2, 1, 3])

        q, k, v = heads(q), heads(k), heads(v)
        scores = tf.matmul(q, k, transpose_b=True) * (1.0 / np.sqrt(self.dim // self.heads))
        keep = tf.cast(pad_mask[:, None, None, :], scores.dtype)
        scores += (1.0 - keep) * -1e9
        attn = tf.nn.softmax(scores, axis=-1)
        ctx = tf.transpose(tf.matmul(attn, v), [0, 2, 1, 3])
        return self.out(tf.reshape(ctx, [b, t, self.dim]))


class ReviewClassifier(keras.Model):
    def __init__(self, hp):
        super().__init__()
        self.embed = keras.layers.Embedding(hp["vocab"], hp["dim"])
        self.attn = MaskedSelfAttention(hp["dim"], hp["heads"])
        self.norm = keras.layers.LayerNormalization()
        self.head = keras.layers.Dense(2, dtype="float32")

    def call(self, tokens):
        pad_mask = tf.not_equal(tokens, 0)
        h = self.embed(tokens)
        h = self.norm(h + self.attn(h, pad_mask))
        m = tf.cast(pad_mask, h.dtype)[..., None]
        pooled = tf.reduce_sum(h * m, axis=1) / tf.maximum(tf.reduce_sum(m, axis=1), 1.0)
        return self.head(pooled)


def make_data(hp, n=1024, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, hp["seq_len"], size=n)
    tokens = rng.integers(1, hp["vocab"], size=(n, hp["seq_len"]))
    tokens[np.arange(hp["seq_len"])[None, :] >= lengths[:, None]] = 0
    labels = (tokens[:, 0] % 2).astype("int32")
    return tokens, labels


def main():
    hp = HPARAMS
    model = ReviewClassifier(hp)
    model.compile(optimizer=keras.optimizers.Adam(hp["lr"]),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    tokens, labels = make_data(hp)
    model.fit(tokens, labels, batch_size=hp["batch"], epochs=hp["epochs"], verbose=2)


if __name__ == "__main__":
    main()
