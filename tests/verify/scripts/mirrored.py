"""Keras 3 `fit` under tf.distribute.MirroredStrategy over two logical CPU devices,
mixed_float16 (compile wraps the optimizer in a LossScaleOptimizer)."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)
keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

rng = np.random.default_rng(5)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")

with strategy.scope():
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, activation="sigmoid", dtype="float32")]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0)
print("trained on", strategy.num_replicas_in_sync, "replicas")
