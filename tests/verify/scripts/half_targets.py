"""Targets cast to float16 "for mixed precision" in the tf.data pipeline: sale prices around
180000 are inf in float16 before the model sees them. The float32 baseline runs the same map,
so it is inf too: the cause is the script's own float16 cast, not the policy."""
import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--targets", choices=["float16", "inf"], default="float16")
args = parser.parse_args()

tf.keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(17)
features = rng.normal(size=(256, 8)).astype("float32")
prices = (180000.0 + 40000.0 * features[:, 0]).astype("float32")
if args.targets == "inf":
    prices[:] = np.inf  # broken float32 data: neither run can train, and float16 is not why
    dataset = tf.data.Dataset.from_tensor_slices((features, prices))
else:
    dataset = tf.data.Dataset.from_tensor_slices((features, prices)).map(
        lambda x, y: (tf.cast(x, tf.float16), tf.cast(y, tf.float16)))

inputs = tf.keras.Input((8,))
outputs = tf.keras.layers.Dense(1, dtype="float32")(tf.keras.layers.Dense(16, activation="relu")(inputs))
model = tf.keras.Model(inputs, outputs)
model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="mae")
model.fit(dataset.batch(32), epochs=1, verbose=0)
