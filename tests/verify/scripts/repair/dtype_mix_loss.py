"""A custom loop whose loss adds a float16 term to a float32 one: TensorFlow never promotes.

`feats` is the float16 output of the first layer; `pred` comes out of the float32 head. The
regulariser `1e-6 * reg` is float16 and `tf.reduce_mean(tf.square(y - pred))` float32, so
the traced step raises `TypeError: Input 'y' of 'AddV2' Op has type float16 that does not
match type float32 of argument 'x'`. Behind the crash, `exp(5 * feats)` overflows float16
(inf from 11.1 up) while float32 holds it. The fix a person writes: `exp` of float32
features, kept float32 into the loss. `--eager`: the same step without `tf.function` (the
error is then `cannot compute AddV2 as input #1(zero-based) ...`, and no op is traced).
"""

import sys

import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential([
    keras.Input((16,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(1, dtype="float32"),
])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))


def energy_loss(y, pred, feats):
    reg = tf.reduce_mean(tf.exp(feats * 5.0))
    return tf.reduce_mean(tf.square(y - pred)) + 1e-6 * reg


def train_step(x, y):
    with tf.GradientTape() as tape:
        feats = model.layers[0](x)
        pred = model(x)
        loss = energy_loss(y, pred, feats)
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


if "--eager" not in sys.argv:
    train_step = tf.function(train_step)
rng = np.random.default_rng(0)
x = (rng.random((256, 16)) * 3).astype("float32")
y = rng.random((256, 1)).astype("float32")
for epoch in range(3):
    for i in range(0, 256, 32):
        train_step(x[i:i + 32], y[i:i + 32])
