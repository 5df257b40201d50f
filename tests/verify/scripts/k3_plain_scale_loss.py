"""Keras 3 custom loop with a plain optimizer (no LossScaleOptimizer) that still calls
``scale_loss``: every Keras 3 optimizer has it (it multiplies by ``loss_scale_factor``
when one is set, else returns the loss). ``--factor N`` sets ``loss_scale_factor``."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
parser.add_argument("--factor", type=float, default=None)
args = parser.parse_args()

rng = np.random.default_rng(4)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.05, loss_scale_factor=args.factor)
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
for xb, yb in dataset.take(args.steps):
    loss = train_step(xb, yb)
print("final loss", float(loss))
