"""Healthy Keras 3 custom loop: @tf.function step, LossScaleOptimizer, scale_loss."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(1)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")

model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1, dtype="float32")]
)
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05))
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
        scaled_loss = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
for step, (xb, yb) in enumerate(dataset.take(args.steps)):
    loss = train_step(xb, yb)
print("final loss", float(loss))
