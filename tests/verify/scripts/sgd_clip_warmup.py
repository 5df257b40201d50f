"""A correct Keras 3 custom loop: LossScaleOptimizer around SGD with gradient clipping
(global_clipnorm, applied after unscaling). The first gradients overflow float16 at the
initial scale 32768, so the scaler skips its warm-up steps and the mixed run lags float32
by those updates; clipped steps move the loss by a fixed amount, so the lag shows as a gap
at any given step -- though both runs reach the same loss."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
parser.add_argument("--target", type=float, default=30.0)
parser.add_argument("--lr", type=float, default=0.2)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(15)
x = rng.normal(size=(512, 8)).astype("float32")
y = (args.target + x @ rng.normal(size=(8, 1))).astype("float32")
model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, dtype="float32")]
)
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(args.lr, global_clipnorm=1.0))
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().take(args.steps):
    train_step(xb, yb)
