"""Keras 3 multi-label image tagger, custom loop with a hand-written binary cross-entropy."""
import numpy as np
import keras
import tensorflow as tf
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")
N_TAGS = 20


def tag_loss(labels, logits):
    probs = ops.sigmoid(logits)
    labels = ops.cast(labels, probs.dtype)
    bce = -(labels * ops.log(probs) + (1.0 - labels) * ops.log(1.0 - probs))
    return ops.mean(ops.cast(bce, "float32"))


def build():
    inputs = keras.Input((48, 48, 3))
    h = layers.Conv2D(32, 3, activation="relu")(inputs)
    h = layers.Conv2D(64, 3, strides=2, activation="relu")(h)
    h = layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, layers.Dense(N_TAGS)(h))


model = build()
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))


@tf.function
def train_step(images, tags):
    with tf.GradientTape() as tape:
        loss = tag_loss(tags, model(images, training=True))
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(12)
    images = rng.uniform(0, 1, size=(128, 48, 48, 3)).astype("float32")
    tags = (rng.uniform(size=(128, N_TAGS)) < 0.1).astype("float32")
    for step in range(8):
        sl = slice(16 * step, 16 * step + 16)
        print(f"step {step} loss {float(train_step(images[sl], tags[sl])):.4f}")
