# What goes wrong: a regression model under mixed_float16 whose output layer computes in
# float16, trained on targets around 1e5 (prices). It trains for a while, then the loss
# turns inf.
# Why: float16's largest value is 65504. The gradient of the loss with respect to the
# float16 output overflows first, so the loss scaler keeps halving the scale; once the
# predictions themselves approach the targets they pass 65504 and become inf. The output
# layer of a mixed-precision model should compute in float32: `Dense(1, dtype="float32")`.
# mpfix: MP205 (unsafe fix: dtype="float32" on the output layer).
import argparse

import numpy as np
import tensorflow as tf
from tensorflow import keras

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=20)
args = parser.parse_args()

keras.utils.set_random_seed(0)
keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(0)
features = rng.normal(size=(512, 8)).astype("float32")
prices = (1.2e5 + 3e4 * features[:, :1] + 1e4 * features[:, 1:2]).astype("float32")

model = keras.Sequential([
    keras.Input((8,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(1),
])
model.compile(optimizer=keras.optimizers.Adam(0.5), loss=keras.losses.MeanSquaredError())
history = model.fit(features, prices, batch_size=64, epochs=args.epochs, verbose=0)
for epoch, loss in enumerate(history.history["loss"]):
    print(f"epoch {epoch}  loss {loss:.4e}")
