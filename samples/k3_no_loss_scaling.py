# What goes wrong: a Keras 3 custom training loop under mixed_float16 with a bare optimizer.
# Why: gradients are computed in float16, whose smallest subnormal is about 6e-8. This
# model's gradients are around 1e-9 (a 1e-5 loss weight, averaged over 1024 examples), so
# almost all of them round to exactly 0 (about 99% of the entries; 0% in float32). No error
# and no NaN: most weights simply stop receiving updates.
# mpfix: MP101 (unsafe fix: LossScaleOptimizer + optimizer.scale_loss inside the tape).
import argparse

import numpy as np
import tensorflow as tf
from tensorflow import keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
args = parser.parse_args()

keras.utils.set_random_seed(0)
keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 16)).astype("float32")
y = (0.01 * x[:, :1]).astype("float32")
LOSS_WEIGHT = 1e-5  # this head is one small term of a larger multi-task loss

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


for step in range(args.steps):
    loss = train_step(x, y)
    if step % 20 == 0 or step == args.steps - 1:
        print(f"step {step:3d}  loss {float(loss):.4e}")
