# What goes wrong: a training script written for TF 2.4 (the first mixed-precision guide)
# crashes on today's TensorFlow before it trains a single step.
# Why: `tf.keras.mixed_precision.experimental` was removed in TF 2.9, `loss_scale="dynamic"`
# is no longer a LossScaleOptimizer argument, and under Keras 3 (tf.keras since TF 2.16)
# `get_scaled_loss`/`get_unscaled_gradients` are gone (`scale_loss` replaced them, and
# `apply_gradients` unscales by itself). `experimental_relax_shapes` and
# `experimental_run_functions_eagerly` still work but are deprecated.
# mpfix: MP301, MP302, MP303, MP306, MP307 (all safe fixes: `mpfix apply`).
import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
args = parser.parse_args()

tf.random.set_seed(0)
tf.config.experimental_run_functions_eagerly(False)
tf.keras.mixed_precision.experimental.set_policy("mixed_float16")

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 16)).astype("float32")
y = (x[:, :1] - 0.5 * x[:, 1:2]).astype("float32")

model = tf.keras.Sequential([
    tf.keras.layers.Dense(32, activation="relu", input_shape=(16,)),
    tf.keras.layers.Dense(1),
    tf.keras.layers.Activation("linear", dtype="float32"),
])
optimizer = tf.keras.optimizers.SGD(0.01)
optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(optimizer, loss_scale="dynamic")
loss_fn = tf.keras.losses.MeanSquaredError()


@tf.function(experimental_relax_shapes=True)
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
        scaled_loss = optimizer.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = optimizer.get_unscaled_gradients(scaled_grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step in range(args.steps):
    loss = train_step(x, y)
    if step % 20 == 0 or step == args.steps - 1:
        print(f"step {step:3d}  loss {float(loss):.4e}")
