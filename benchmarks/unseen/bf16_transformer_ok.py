"""Tiny causal transformer block in keras.ops trained in bfloat16 (TPU-style: no loss scaling needed)."""
import numpy as np
import tensorflow as tf
import keras
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_bfloat16")
SEQ, DIM, HEADS, VOCAB = 32, 64, 4, 100


class CausalSelfAttention(layers.Layer):
    def __init__(self, dim, heads, **kwargs):
        super().__init__(**kwargs)
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = layers.Dense(3 * dim)
        self.out = layers.Dense(dim)

    def call(self, x):
        b, t = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(self.qkv(x), (b, t, 3, self.heads, self.head_dim))
        q, k, v = [ops.transpose(qkv[:, :, i], (0, 2, 1, 3)) for i in range(3)]
        scores = ops.matmul(q, ops.swapaxes(k, -1, -2)) / ops.sqrt(ops.cast(self.head_dim, x.dtype))
        causal = ops.tril(ops.ones((t, t), dtype="bool"))
        scores = ops.where(causal, scores, -1e9)
        attn = ops.softmax(scores, axis=-1)
        ctx = ops.reshape(ops.transpose(ops.matmul(attn, v), (0, 2, 1, 3)), (b, t, self.heads * self.head_dim))
        return self.out(ctx)


def lm():
    tokens = keras.Input((SEQ,), dtype="int32")
    h = layers.Embedding(VOCAB, DIM)(tokens)
    h = layers.LayerNormalization()(h + CausalSelfAttention(DIM, HEADS)(h))
    h = layers.LayerNormalization()(h + layers.Dense(DIM, activation="gelu")(h))
    return keras.Model(tokens, layers.Dense(VOCAB, dtype="float32")(h))


if __name__ == "__main__":
    model = lm()
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    data = np.random.default_rng(13).integers(0, VOCAB, size=(64, SEQ + 1)).astype("int32")
    for step in range(3):
        with tf.GradientTape() as tape:
            loss = loss_fn(data[:, 1:], model(data[:, :-1], training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        print("step", step, "loss", float(loss))
