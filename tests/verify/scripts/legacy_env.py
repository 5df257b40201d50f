"""Chooses Keras 2 itself: sets TF_USE_LEGACY_KERAS before importing TensorFlow, then uses
Keras 2-only API (``get_scaled_loss``) through ``tf.keras``."""
import argparse
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras
assert keras.__name__.startswith("tf_keras"), f"tf.keras is {keras.__name__}, not Keras 2"

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(8)
x = rng.normal(size=(128, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True).astype("float32")
model = keras.Sequential(
    [keras.layers.Dense(16, activation="tanh", input_shape=(8,)), keras.layers.Dense(1, dtype="float32")]
)
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))


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
