# What goes wrong: an RMS normalisation with an epsilon of 1e-8 under mixed_float16, on a batch
# that contains all-zero (padding) feature rows. The loss is NaN from the very first step.
# Why: 1e-8 is below float16's smallest subnormal (about 6e-8), so it rounds to 0. For a
# zero row, mean(x^2) + epsilon is then 0, rsqrt(0) is inf and 0 * inf is NaN. In float32
# the same code is fine. An epsilon float16 can hold (1e-4) keeps the row at 0.
# mpfix: MP202 (unsafe fix: a float16-representable epsilon).
import argparse

import numpy as np
import tensorflow as tf
from tensorflow import keras

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
args = parser.parse_args()

keras.utils.set_random_seed(0)
keras.mixed_precision.set_global_policy("mixed_float16")


class RMSNorm(keras.layers.Layer):
    def call(self, x):
        # keras.ops.mean sums in float32 (tf.reduce_mean would sum float16 squares: MP203).
        mean_square = keras.ops.mean(tf.square(x), axis=-1, keepdims=True)
        return x * tf.math.rsqrt(mean_square + 1e-8)


rng = np.random.default_rng(0)
features = rng.normal(size=(512, 16)).astype("float32")
features[::8] = 0.0  # padding rows
targets = features[:, :1].copy()

model = keras.Sequential([
    keras.Input((16,)),
    RMSNorm(),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.MeanSquaredError())
history = model.fit(features, targets, batch_size=64, epochs=args.epochs, verbose=0)
for epoch, loss in enumerate(history.history["loss"]):
    print(f"epoch {epoch}  loss {loss:.4f}")
