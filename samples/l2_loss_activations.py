# What goes wrong: an activity penalty `1e-4 * tf.nn.l2_loss(h)` on the float16 activations
# of a layer, under mixed_float16. The loss is inf from the first step and never recovers.
# Why: l2_loss sums the squares of all 128 x 256 activations in float16, and the sum passes
# float16's maximum of 65504 long before the 1e-4 weight is applied: inf * 1e-4 is still
# inf, and casting that to float32 afterwards keeps it inf. Casting h to float32 before
# the reduction keeps the penalty finite.
# mpfix: MP203 (unsafe fix: compute the reduction in float32).
import argparse

import numpy as np
import tensorflow as tf
from tensorflow import keras

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
args = parser.parse_args()

keras.utils.set_random_seed(0)
keras.mixed_precision.set_global_policy("mixed_float16")


class PenalisedDense(keras.layers.Dense):
    """A Dense layer that penalises large activations (an activity regulariser)."""

    def call(self, inputs):
        h = super().call(inputs)
        # The cast makes the penalty's dtype match the float32 loss, but comes too late.
        self.add_loss(tf.cast(1e-4 * tf.nn.l2_loss(h), tf.float32))
        return h


rng = np.random.default_rng(0)
features = (8.0 * rng.normal(size=(512, 32))).astype("float32")
targets = features[:, :1] - features[:, 1:2]

model = keras.Sequential([
    keras.Input((32,)),
    PenalisedDense(256, activation="relu"),
    keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.MeanSquaredError())
history = model.fit(features, targets, batch_size=128, epochs=args.epochs, verbose=0)
for epoch, loss in enumerate(history.history["loss"]):
    print(f"epoch {epoch}  loss {loss:.4f}")
