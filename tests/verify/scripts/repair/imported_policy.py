"""A custom loop whose mixed_float16 policy is set by an imported module (mp_setup, from train_config.json).

The loss is ~1e-6 and unscaled: most float16 gradients underflow to exactly 0. The
static rules see no policy in this file, so MP101 (no loss scaling) stays silent. The
fix: loss scaling (LossScaleOptimizer and the generation's scale calls).
Runs on Keras 3 and, with TF_USE_LEGACY_KERAS=1, on tf_keras.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

import mp_setup

mp_setup.configure()

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1)) * 1e-3).astype("float32")

model = keras.Sequential([
    keras.Input((8,)),
    keras.layers.Dense(64, activation="tanh"),
    keras.layers.Dense(64, activation="tanh"),
    keras.layers.Dense(1, dtype="float32"),
])
optimizer = keras.optimizers.SGD(0.1)
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(4):
    for i in range(0, 256, 16):
        train_step(x[i:i + 16], y[i:i + 16])
