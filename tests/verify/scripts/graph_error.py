"""Errors raised inside a tf.function step: ``--mode trace`` (a shape mistake found while
tracing: "in user code:"), ``--mode run`` (an assertion failing when the graph runs:
"Graph execution error:")."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["trace", "run"], default="trace")
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.1)
x = np.ones((8, 4), "float32")


@tf.function
def train_step(xb):
    with tf.GradientTape() as tape:
        if args.mode == "trace":
            pred = model(tf.reshape(xb, [8, 2, 2]))
        else:
            pred = model(xb)
        tf.debugging.assert_less(tf.reduce_max(pred), -1e6, message="predictions out of range")
        loss = tf.reduce_mean(pred)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


for _ in range(args.steps):
    train_step(x)
