"""Reads a line from stdin before training (`echo go | mpfix verify reads_stdin.py`):
every run of verify (mixed and float32) must get the same input."""
import numpy as np
import tensorflow as tf

keras = tf.keras

answer = input("continue? ")
if answer != "go":
    raise SystemExit(f"expected 'go' on stdin, got {answer!r}")
keras.mixed_precision.set_global_policy("mixed_float16")
x = np.random.default_rng(1).normal(size=(32, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1, dtype="float32")])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(x, y, batch_size=8, epochs=100, verbose=0)
