"""Keras 3 custom loop under mixed_float16 without any loss scaling: tiny float16
gradients round to exactly zero (float16's smallest subnormal is about 6e-8)."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(2)
x = rng.normal(size=(256, 32)).astype("float32")
y = (x[:, :1] * 0.01).astype("float32")

model = keras.Sequential(
    [
        keras.Input((32,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ]
)
optimizer = keras.optimizers.SGD(0.1)


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        # A small loss weight, as auxiliary losses often have: its float16 gradients
        # underflow without loss scaling.
        loss = tf.reduce_mean(tf.square(yb - model(xb, training=True))) * 1e-5
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step in range(args.steps):
    loss = train_step(x, y)
print("final loss", float(loss))
