"""Sequence tagging with a structured hinge loss (tf_keras custom loop): the score of a tag path is
the sum of its emission scores over 4096 time steps.

The float16 emission scores of the gold path are ~25 each; their sum over the sequence is ~100000:
inf, and the hinge max(0, best - gold + margin) is NaN. A per-step mean would stay in range; the sum
is what the loss defines. Keras 2 via TF_USE_LEGACY_KERAS=1.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf

keras = tf.keras
keras.mixed_precision.set_global_policy("mixed_float16")

T, TAGS = 4096, 6
rng = np.random.default_rng(8)
tokens = (rng.normal(size=(8, T, 4)) + 2.0).astype("float32")
tags = rng.integers(0, TAGS, size=(8, T)).astype("int32")

emitter = keras.Sequential([
    keras.Input((T, 4)),
    keras.layers.Dense(16, activation="relu", kernel_initializer=keras.initializers.Constant(1.0)),
    keras.layers.Dense(TAGS, kernel_initializer=keras.initializers.Constant(0.5)),
])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1e-5))


def path_score(emissions, path):
    picked = tf.gather(emissions, path, batch_dims=2)
    return tf.reduce_sum(picked, axis=1)


@tf.function
def train_step(x, gold):
    with tf.GradientTape() as tape:
        emissions = emitter(x, training=True)
        best = tf.argmax(emissions, axis=-1, output_type=tf.int32)
        margin = path_score(emissions, best) - path_score(emissions, gold) + 1.0
        loss = tf.reduce_mean(tf.cast(tf.nn.relu(margin), tf.float32)) / T
        scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, emitter.trainable_variables))
    optimizer.apply_gradients(zip(grads, emitter.trainable_variables))
    return loss


for step in range(20):
    loss = train_step(tf.constant(tokens), tf.constant(tags))
print("loss", float(loss))
