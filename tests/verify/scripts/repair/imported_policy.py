"""A custom loop whose mixed_float16 policy is set by an imported module (mp_setup, from train_config.json).

The loss is one small term (weight 1e-5) of a multi-task loss and unscaled: most float16
gradients underflow to exactly 0. The
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
x = rng.normal(size=(1024, 16)).astype("float32")
y = (0.01 * x[:, :1]).astype("float32")
LOSS_WEIGHT = 1e-5

model = keras.Sequential([
    keras.Input((16,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(1, dtype="float32"),
])
optimizer = keras.optimizers.SGD(0.1)


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = LOSS_WEIGHT * tf.reduce_mean(tf.square(yb - model(xb, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step in range(60):
    train_step(x, y)
