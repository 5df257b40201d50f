"""Keras 3 token tagger: einsum attention with a bias mask and an activity penalty, trained with fit."""
import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
SEQ, DIM, TAGS = 40, 48, 7


class EinsumAttention(tf.keras.layers.Layer):
    def __init__(self, dim, penalty=1e-3, **kwargs):
        super().__init__(**kwargs)
        self.to_qkv = tf.keras.layers.Dense(3 * dim, use_bias=False)
        self.penalty = penalty
        self.dim = dim

    def call(self, h, mask):
        q, k, v = [part for part in tf.split(self.to_qkv(h), 3, axis=-1)]
        scores = tf.einsum("bqd,bkd->bqk", q, k) * (self.dim**-0.5)
        keep = tf.cast(mask[:, None, :], scores.dtype)
        scores += (1.0 - keep) * tf.cast(tf.float32.min, scores.dtype)
        out = tf.einsum("bqk,bkd->bqd", tf.nn.softmax(scores, axis=-1), v)
        self.add_loss(self.penalty * tf.reduce_sum(out**2))
        return out


def build():
    tokens = tf.keras.Input((SEQ,), dtype="int32")
    mask = tf.keras.Input((SEQ,), dtype="bool")
    h = tf.keras.layers.Embedding(2000, DIM)(tokens)
    h = h + EinsumAttention(DIM)(h, mask)
    logits = tf.keras.layers.Dense(TAGS)(h)
    probs = tf.keras.layers.Activation("softmax", dtype="float32")(logits)
    return tf.keras.Model([tokens, mask], probs)


if __name__ == "__main__":
    rng = np.random.default_rng(21)
    tokens = rng.integers(1, 2000, size=(128, SEQ)).astype("int32")
    mask = np.arange(SEQ)[None, :] < rng.integers(5, SEQ, size=(128, 1))
    tags = rng.integers(0, TAGS, size=(128, SEQ))
    model = build()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit([tokens, mask], tags, batch_size=32, epochs=1, steps_per_epoch=3, verbose=2)
