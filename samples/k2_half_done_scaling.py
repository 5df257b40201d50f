# What goes wrong: Keras 2 (tf_keras) loss scaling done halfway: the loss is scaled with
# get_scaled_loss, but the gradients never go through get_unscaled_gradients.
# Why: in Keras 2, LossScaleOptimizer.apply_gradients does NOT unscale. Every update is
# multiplied by the loss scale (32768 at the start): one SGD step takes the loss from 2.3 to
# about 4e10, then the gradients overflow and the loss scaler skips every later step, so
# training silently stalls. Keras only logs a warning.
# mpfix: MP103 (safe fix: grads = optimizer.get_unscaled_gradients(grads)).
import argparse

import numpy as np
import tensorflow as tf
import tf_keras as keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
args = parser.parse_args()

keras.utils.set_random_seed(0)
keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 16)).astype("float32")
y = (x[:, :1] - 0.5 * x[:, 1:2]).astype("float32")

model = keras.Sequential([
    keras.Input((16,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(1, dtype="float32"),
])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step in range(args.steps):
    loss = train_step(x, y)
    if step % 20 == 0 or step == args.steps - 1:
        print(f"step {step:3d}  loss {float(loss):.4e}")
