# A mixed-precision training script done right, for comparison: `mpfix check` finds nothing
# and `mpfix verify` calls it healthy.
# Custom loop under mixed_float16 on Keras 3: the optimizer is a LossScaleOptimizer, the
# loss is scaled inside the tape with `optimizer.scale_loss` (apply_gradients unscales by
# itself), the output layer computes in float32, and the one epsilon (1e-3) is one float16
# can represent.
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
x = rng.normal(size=(256, 16)).astype("float32")
y = (x[:, :1] - 0.5 * x[:, 1:2]).astype("float32")

model = keras.Sequential([
    keras.Input((16,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.LayerNormalization(epsilon=1e-3),
    keras.layers.Dense(1, dtype="float32"),
])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-2))
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
        scaled_loss = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step in range(args.steps):
    loss = train_step(x, y)
    if step % 20 == 0 or step == args.steps - 1:
        print(f"step {step:3d}  loss {float(loss):.4e}")
