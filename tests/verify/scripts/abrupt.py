"""A healthy custom loop that ends abruptly: ``--exit-after N`` calls os._exit(0) after N
steps (no finally, no atexit; status --exit-code); ``--hang-after N`` sleeps forever after N steps."""
import argparse
import os
import time

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--exit-after", type=int, default=0)
parser.add_argument("--hang-after", type=int, default=0)
parser.add_argument("--exit-code", type=int, default=0)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(13)
x = rng.normal(size=(64, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(yb - model(xb, training=True)))
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


step = 0
while True:
    train_step(x, y)
    step += 1
    if step == args.exit_after:
        os._exit(args.exit_code)
    if step == args.hang_after:
        while True:
            time.sleep(1)
