"""tf_keras transformer encoder block for padded token sequences. Padded keys are masked with the
most negative float, the usual trick to make their softmax weight exactly zero."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras

VOCAB = 500
LENGTH = 40
DIM = 32
HEADS = 4


class EncoderBlock(keras.layers.Layer):
    def __init__(self, dim, heads, **kwargs):
        super().__init__(**kwargs)
        self.heads, self.depth = heads, dim // heads
        self.qkv = keras.layers.Dense(3 * dim)
        self.out = keras.layers.Dense(dim)
        self.ffn = keras.Sequential([keras.layers.Dense(4 * dim, activation="gelu"), keras.layers.Dense(dim)])
        self.norm1 = keras.layers.LayerNormalization()
        self.norm2 = keras.layers.LayerNormalization()

    def split(self, t):
        b = tf.shape(t)[0]
        return tf.transpose(tf.reshape(t, (b, -1, self.heads, self.depth)), (0, 2, 1, 3))

    def call(self, x, mask):
        q, k, v = tf.split(self.qkv(x), 3, axis=-1)
        q, k, v = self.split(q), self.split(k), self.split(v)
        scores = tf.matmul(q, k, transpose_b=True) / tf.math.sqrt(tf.cast(self.depth, x.dtype))
        pad = 1.0 - tf.cast(mask[:, None, None, :], scores.dtype)
        scores += pad * tf.float32.min
        attn = tf.nn.softmax(scores, axis=-1)
        ctx = tf.reshape(tf.transpose(tf.matmul(attn, v), (0, 2, 1, 3)), tf.shape(x))
        x = self.norm1(x + self.out(ctx))
        return self.norm2(x + self.ffn(x))


def build_model():
    tokens = keras.Input((LENGTH,), dtype="int32")
    mask = keras.layers.Lambda(lambda t: tf.not_equal(t, 0))(tokens)
    h = keras.layers.Embedding(VOCAB, DIM)(tokens)
    h = EncoderBlock(DIM, HEADS)(h, mask)
    h = keras.layers.GlobalAveragePooling1D()(h)
    outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(h)
    return keras.Model(tokens, outputs)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(4)
    tokens = rng.integers(1, VOCAB, (2048, LENGTH))
    lengths = rng.integers(10, LENGTH, 2048)
    tokens[np.arange(LENGTH)[None, :] >= lengths[:, None]] = 0
    labels = (np.sum(tokens < 100, axis=1) > 3).astype("int32")
    model = build_model()
    model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(tokens, labels, batch_size=64, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
