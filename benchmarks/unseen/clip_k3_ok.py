"""Keras 3 CLIP-style image/text contrastive model with a learned, clamped temperature."""
import math

import numpy as np
import keras
import tensorflow as tf
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")


class ContrastiveHead(layers.Layer):
    def build(self, input_shape):
        self.logit_scale = self.add_weight(shape=(), initializer=keras.initializers.Constant(math.log(1 / 0.07)), name="logit_scale")

    def call(self, image_emb, text_emb):
        image_emb = ops.normalize(ops.cast(image_emb, "float32"), axis=-1)
        text_emb = ops.normalize(ops.cast(text_emb, "float32"), axis=-1)
        scale = ops.exp(ops.minimum(ops.cast(self.logit_scale, "float32"), math.log(100.0)))
        return scale * ops.matmul(image_emb, ops.transpose(text_emb))


image_tower = keras.Sequential([keras.Input((32, 32, 3)), layers.Conv2D(32, 3, activation="relu"), layers.GlobalAveragePooling2D(), layers.Dense(64)])
text_tower = keras.Sequential([keras.Input((16,), dtype="int32"), layers.Embedding(500, 64), layers.GlobalAveragePooling1D(), layers.Dense(64)])
head = ContrastiveHead()
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.AdamW(1e-3, weight_decay=0.1))
xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(images, tokens):
    with tf.GradientTape() as tape:
        logits = head(image_tower(images, training=True), text_tower(tokens, training=True))
        labels = tf.range(tf.shape(logits)[0])
        loss = 0.5 * (xent(labels, logits) + xent(labels, tf.transpose(logits)))
        scaled = optimizer.scale_loss(loss)
    variables = image_tower.trainable_variables + text_tower.trainable_variables + head.trainable_variables
    grads = tape.gradient(scaled, variables)
    optimizer.apply_gradients(zip(grads, variables))
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(15)
    images = rng.uniform(size=(128, 32, 32, 3)).astype("float32")
    tokens = rng.integers(0, 500, size=(128, 16)).astype("int32")
    for step in range(6):
        sl = slice(32 * (step % 4), 32 * (step % 4) + 32)
        print(f"step {step} loss {float(train_step(images[sl], tokens[sl])):.4f}")
