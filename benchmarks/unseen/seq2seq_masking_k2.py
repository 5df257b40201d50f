"""Keras 2 (tf_keras) GRU seq2seq tagger, custom loop, padded tokens masked out of the loss."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")
VOCAB, TAGS, MAXLEN = 3000, 17, 50


def build():
    tokens = keras.Input((MAXLEN,), dtype="int32")
    h = keras.layers.Embedding(VOCAB, 96, mask_zero=True)(tokens)
    h = keras.layers.GRU(128, return_sequences=True)(h)
    return keras.Model(tokens, keras.layers.Dense(TAGS)(h))


model = build()
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
token_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


@tf.function
def train_step(tokens, tags, lengths):
    with tf.GradientTape() as tape:
        logits = model(tokens, training=True)
        per_token = token_loss(tags, logits)
        mask = tf.sequence_mask(lengths, MAXLEN, dtype=tf.float32)
        loss = tf.reduce_sum(per_token * mask) / tf.reduce_sum(mask)
        scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(14)
    lengths = rng.integers(5, MAXLEN, size=(64,)).astype("int32")
    tokens = rng.integers(1, VOCAB, size=(64, MAXLEN)).astype("int32")
    tokens[np.arange(MAXLEN)[None, :] >= lengths[:, None]] = 0
    tags = rng.integers(0, TAGS, size=(64, MAXLEN)).astype("int32")
    for step in range(4):
        sl = slice(16 * step, 16 * step + 16)
        print(f"step {step} loss {float(train_step(tokens[sl], tags[sl], lengths[sl])):.4f}")
