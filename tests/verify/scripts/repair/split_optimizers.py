"""Scaled gradients split between two optimizers, only one of which unscales them.

The backbone trains with a LossScaleOptimizer, the head with a plain optimizer (a
common "different learning rate for the head" setup). Both take their share of the
gradients of the *scaled* loss: the head's updates are 32768 times too large and its
weights blow up. Keras 3 (`scale_loss`, `apply`) by default; with TF_USE_LEGACY_KERAS=1
the same bug in tf_keras (`get_scaled_loss`/`get_unscaled_gradients` for the backbone
only). No static rule has a fix for it; `mpfix repair` must not pretend it has one.
"""

import os

import numpy as np
import tensorflow as tf
from tensorflow import keras

LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")

backbone = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="tanh")])
head = keras.Sequential([keras.Input((32,)), keras.layers.Dense(1, dtype="float32")])
body_opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))
head_opt = keras.optimizers.SGD(0.01)


@tf.function
def train_step(xb, yb):
    body_vars, head_vars = backbone.trainable_variables, head.trainable_variables
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(yb - head(backbone(xb, training=True), training=True)))
        scaled = body_opt.get_scaled_loss(loss) if LEGACY else body_opt.scale_loss(loss)
    grads = tape.gradient(scaled, body_vars + head_vars)
    body_grads, head_grads = grads[:len(body_vars)], grads[len(body_vars):]
    if LEGACY:
        body_opt.apply_gradients(zip(body_opt.get_unscaled_gradients(body_grads), body_vars))
        head_opt.apply_gradients(zip(head_grads, head_vars))
    else:
        body_opt.apply(body_grads, body_vars)
        head_opt.apply(head_grads, head_vars)
    return loss


for epoch in range(3):
    for i in range(0, 256, 16):
        train_step(x[i:i + 16], y[i:i + 16])
