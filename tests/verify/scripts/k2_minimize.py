"""Keras 2 custom loop that trains through ``optimizer.minimize(lambda: loss, vars)`` on a
LossScaleOptimizer: the optimizer scales the loss callable itself."""
import argparse

import numpy as np
import tensorflow as tf
import tf_keras as keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(7)
x = rng.normal(size=(128, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True).astype("float32")

model = keras.Sequential(
    [keras.layers.Dense(16, activation="tanh", input_shape=(8,)), keras.layers.Dense(1, dtype="float32")]
)
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))


@tf.function
def train_step(xb, yb):
    optimizer.minimize(lambda: tf.reduce_mean(tf.square(yb - model(xb, training=True))), model.trainable_variables)


for step in range(args.steps):
    train_step(x, y)
print("done")
