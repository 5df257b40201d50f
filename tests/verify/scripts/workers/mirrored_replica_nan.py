"""MirroredStrategy over two logical CPU devices, a custom `strategy.run` loop under
mixed_float16 with a LossScaleOptimizer: at step --at, replica 1's input is NaN (replica 0's
is not). Keras 3's LossScaleOptimizer checks replica 0's gradients only and applies the
all-reduced NaN, so every loss is NaN from the next step on; the NaN itself is on replica 1
at step --at. Keras 2 with TF_USE_LEGACY_KERAS=1.
"""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras
KERAS3 = keras.layers.Dense.__module__.startswith("keras.")

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
parser.add_argument("--at", type=int, default=3)
args = parser.parse_args()

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

rng = np.random.default_rng(3)
x = rng.normal(size=(32, 8)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")

with strategy.scope():
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, dtype="float32")]
    )
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    if KERAS3:
        optimizer.build(model.trainable_variables)


def replica_step(xb, yb, step):
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    poisoned = tf.logical_and(tf.equal(replica, 1), tf.equal(step, args.at))
    xb = tf.where(poisoned, xb * float("nan"), xb)
    with tf.GradientTape() as tape:
        per_example = tf.square(yb - model(xb, training=True))[:, 0]
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=32)
        scaled = optimizer.scale_loss(loss) if KERAS3 else optimizer.get_scaled_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    if not KERAS3:
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def train_step(xb, yb, step):
    losses = strategy.run(replica_step, args=(xb, yb, step))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat())
for step, (xb, yb) in zip(range(args.steps), data):
    loss = train_step(xb, yb, tf.constant(step))
print("final loss", float(loss))
