"""Keras 3 small BERT-style encoder (post-LN blocks with LayerNormalization(epsilon=1e-12), the value
in BERT's config) fine-tuned for sentence classification in a custom loop with a hand-rolled static
loss scale (as in Apex's static scaling): the loss is multiplied by 1024, the gradients divided by
1024 in float32, and a step with non-finite gradients is skipped."""
import numpy as np
import tensorflow as tf
import keras

VOCAB, SEQ, DIM, HEADS, LOSS_SCALE = 500, 32, 64, 4, 1024.0


def encoder_block(x):
    att = keras.layers.MultiHeadAttention(HEADS, DIM // HEADS)(x, x)
    x = keras.layers.LayerNormalization(epsilon=1e-12)(x + att)
    ff = keras.layers.Dense(4 * DIM, activation="gelu")(x)
    ff = keras.layers.Dense(DIM)(ff)
    return keras.layers.LayerNormalization(epsilon=1e-12)(x + ff)


def build():
    ids = keras.Input((SEQ,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, DIM)(ids)
    x = keras.layers.LayerNormalization(epsilon=1e-12)(x)
    for _ in range(2):
        x = encoder_block(x)
    pooled = keras.layers.GlobalAveragePooling1D()(x)
    logits = keras.layers.Dense(3, dtype="float32")(pooled)
    return keras.Model(ids, logits)


def make_data(n=2048, seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, VOCAB, (n, SEQ))
    y = rng.integers(0, 3, n)
    ids[np.arange(n), rng.integers(0, SEQ, n)] = y  # the class token sits somewhere in the sentence
    return ids.astype("int32"), y.astype("int32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = build()
    optimizer = keras.optimizers.AdamW(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
            scaled = loss * LOSS_SCALE
        grads = tape.gradient(scaled, model.trainable_variables)
        grads = [tf.convert_to_tensor(g) / LOSS_SCALE for g in grads]  # the embedding gradient is IndexedSlices
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        if finite:
            optimizer.apply(grads, model.trainable_variables)
        return loss, finite

    for epoch in range(3):
        for i in range(0, len(x), 64):
            loss, finite = train_step(x[i:i + 64], y[i:i + 64])
        acc = (np.argmax(model(x[:512]), 1) == y[:512]).mean()
        print(f"epoch {epoch} loss {float(loss):.3f} finite {bool(finite)} accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
