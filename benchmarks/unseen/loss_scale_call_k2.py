"""tf_keras custom training loop for a character-level language model (GRU), written from the
TF 2.3-era mixed precision guide: get_scaled_loss / get_unscaled_gradients, and the loss scale
logged next to the loss every few steps."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as keras

VOCAB, SEQ = 48, 40


def build():
    ids = keras.Input((SEQ,), dtype="int32")
    h = keras.layers.Embedding(VOCAB, 32)(ids)
    h = keras.layers.GRU(64, return_sequences=True)(h)
    logits = keras.layers.Dense(VOCAB, dtype="float32")(h)
    return keras.Model(ids, logits)


def make_batches(n=1024, batch=64, seed=3):
    rng = np.random.default_rng(seed)
    text = np.cumsum(rng.integers(1, 4, n * (SEQ + 1))) % VOCAB  # a learnable walk over the alphabet
    seqs = text.reshape(n, SEQ + 1).astype("int32")
    return tf.data.Dataset.from_tensor_slices((seqs[:, :-1], seqs[:, 1:])).batch(batch)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = build()
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(3e-3))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = optimizer.get_scaled_loss(loss)
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step = 0
    for epoch in range(3):
        for x, y in make_batches(seed=epoch):
            loss = train_step(x, y)
            step += 1
            if step % 10 == 0:
                print(f"step {step} loss {float(loss):.3f} loss scale {float(optimizer.loss_scale()):.0f}")


if __name__ == "__main__":
    main()
