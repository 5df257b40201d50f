"""Keras 3 fixed loss scale (loss_scale_factor on a plain optimizer), a custom tf.function step.

``--scale-loss``: the step multiplies the loss by the scale (``optimizer.scale_loss``), as
``apply`` divides the gradients by it. Without it every update is 1/1024 of float32's.
"""
import sys

import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
SCALE_LOSS = "--scale-loss" in sys.argv

model = keras.Sequential([
    keras.Input((8,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(1, dtype="float32"),
])
optimizer = keras.optimizers.SGD(0.05, loss_scale_factor=1024.0)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")


@tf.function
def step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        scaled = optimizer.scale_loss(loss) if SCALE_LOSS else loss
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(100):
    for i in range(0, 256, 32):
        step(x[i:i + 32], y[i:i + 32])
