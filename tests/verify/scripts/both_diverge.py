"""A learning rate far too high for a linear regression: the loss grows geometrically in
float32 exactly as under mixed precision (the only layer computes in float32)."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(11)
x = rng.normal(size=(256, 4)).astype("float32")
y = (x @ rng.normal(size=(4, 1))).astype("float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, dtype="float32")])
model.compile(optimizer=keras.optimizers.SGD(1.5), loss="mse")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0)
