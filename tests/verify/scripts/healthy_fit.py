"""Healthy Keras 3 `fit` under mixed_float16: float32 softmax output, loss scaled by compile."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(0)
x = rng.normal(size=(512, 16)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("int64")

model = keras.Sequential(
    [
        keras.Input((16,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(2),
        keras.layers.Activation("softmax", dtype="float32"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0)
print("trained", args.steps, "steps")
