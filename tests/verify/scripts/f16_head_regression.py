"""Keras 3 `fit` regression whose targets sit near 3000 (a sensor reading, say) while
varying by only a few units, under mixed_float16 with a float16 output layer (the bug:
no dtype="float32" on the last Dense). Nothing overflows and no step is skipped, but
float16's spacing at 2048..4096 is 2.0: every prediction is rounded to an even number,
so the loss cannot fall below ~1/3 while float32 fits the targets almost exactly.
``--float32-head`` is the fix."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
parser.add_argument("--float32-head", action="store_true")
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(3)
x = rng.normal(size=(1024, 8)).astype("float32")
y = (3000.0 + x @ rng.normal(size=(8, 1))).astype("float32")

head_dtype = "float32" if args.float32_head else None  # None: the global mixed_float16
model = keras.Sequential(
    [
        keras.Input((8,)),
        # Starting from the mean of the targets, as a careful regression script does.
        keras.layers.Dense(1, bias_initializer=keras.initializers.Constant(3000.0), dtype=head_dtype),
    ]
)
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=0).batch(32).repeat()
model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0)
print("trained", args.steps, "steps")
