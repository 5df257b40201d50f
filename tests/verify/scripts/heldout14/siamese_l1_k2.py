"""Siamese verification (tf_keras custom loop) with a contrastive loss on the L1 distance of the
two embeddings.

The embedding tower keeps the raw scale of its inputs (spectral features ~100s); the L1 distance
sums |a - b| ~200 over 512 dimensions: ~100000, inf in float16, and the contrastive loss is inf/NaN.
Keras 2 via tf_keras.
"""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(21)
left = (rng.normal(size=(256, 64)) * 100.0).astype("float32")
same = rng.integers(0, 2, size=(256,)).astype("float32")
right = np.where(same[:, None] > 0, left + rng.normal(size=left.shape) * 5.0, rng.normal(size=left.shape) * 100.0).astype("float32")

tower = keras.Sequential([
    keras.Input((64,)),
    keras.layers.Dense(512, kernel_initializer=keras.initializers.RandomNormal(stddev=0.25)),
    keras.layers.LeakyReLU(0.2),
])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-4))
MARGIN = 50.0


def l1_distance(a, b):
    return tf.reduce_sum(tf.abs(a - b), axis=-1)


@tf.function
def train_step(xa, xb, label):
    with tf.GradientTape() as tape:
        d = tf.cast(l1_distance(tower(xa, training=True), tower(xb, training=True)), tf.float32) / 512.0
        loss = tf.reduce_mean(label * d + (1.0 - label) * tf.nn.relu(MARGIN - d))
        scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, tower.trainable_variables))
    optimizer.apply_gradients(zip(grads, tower.trainable_variables))
    return loss


for epoch in range(5):
    for start in range(0, 256, 64):
        loss = train_step(left[start:start + 64], right[start:start + 64], same[start:start + 64])
print("loss", float(loss))
