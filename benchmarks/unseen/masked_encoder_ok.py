"""Keras 3 sequence classifier, custom loop: a correct mixed-precision reference."""
import numpy as np
import tensorflow as tf

VOCAB, SEQ, DIM = 500, 24, 32


class MaskedMeanPool(tf.keras.layers.Layer):
    def call(self, h, mask):
        mask = tf.cast(mask, h.dtype)[:, :, None]
        total = tf.reduce_sum(tf.cast(h * mask, tf.float32), axis=1)
        count = tf.reduce_sum(tf.cast(mask, tf.float32), axis=1)
        return total / tf.maximum(count, 1.0)


class Classifier(tf.keras.Model):
    def __init__(self, classes):
        super().__init__()
        self.embed = tf.keras.layers.Embedding(VOCAB, DIM)
        self.attn = tf.keras.layers.MultiHeadAttention(num_heads=4, key_dim=DIM // 4)
        self.norm = tf.keras.layers.LayerNormalization(epsilon=1e-5)
        self.pool = MaskedMeanPool()
        self.head = tf.keras.layers.Dense(classes, dtype="float32")

    def call(self, tokens, mask, training=False):
        h = self.embed(tokens)
        attn_mask = tf.logical_and(mask[:, :, None], mask[:, None, :])
        h = self.norm(h + self.attn(h, h, attention_mask=attn_mask, training=training))
        return self.head(self.pool(h, mask))


def main(steps=8):
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(12)
    tokens = rng.integers(1, VOCAB, size=(256, SEQ)).astype("int32")
    mask = np.arange(SEQ)[None, :] < rng.integers(3, SEQ, size=(256, 1))
    labels = rng.integers(0, 3, size=256)
    model = Classifier(3)
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.AdamW(1e-3, global_clipnorm=1.0))
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(t, m, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(t, m, training=True))
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    data = tf.data.Dataset.from_tensor_slices((tokens, mask, labels)).batch(32)
    for i, (t, m, y) in enumerate(data.take(steps)):
        print(i, float(train_step(t, m, y)))


if __name__ == "__main__":
    main()
