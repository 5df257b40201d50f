"""Chooses Keras 2 itself: sets TF_USE_LEGACY_KERAS before importing TensorFlow, then
imports Keras through ``tensorflow.keras`` submodules (which TensorFlow resolves when it is
imported, not when they are used) and uses Keras 2-only API (``get_scaled_loss``)."""
import argparse
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.keras import Sequential, layers, mixed_precision, optimizers  # noqa: E402

assert layers.Dense.__module__.startswith("tf_keras"), f"layers come from {layers.Dense.__module__}, not Keras 2"

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(8)
x = rng.normal(size=(128, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True).astype("float32")
model = Sequential([layers.Dense(16, activation="tanh", input_shape=(8,)), layers.Dense(1, dtype="float32")])
optimizer = mixed_precision.LossScaleOptimizer(optimizers.SGD(0.01))


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(yb - model(xb, training=True)))
        scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step in range(args.steps):
    train_step(x, y)
print("done")
