"""A Keras 3 custom loop whose float16 predictions are made outside any layer (a float32
layer, then a float16 cast and a scale): only the loss sees them."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")
rng = np.random.default_rng(17)
x = rng.normal(size=(64, 4)).astype("float32")
y = (300.0 + 10.0 * x[:, :1]).astype("float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, bias_initializer="ones", dtype="float32")])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1e-3))
mse = keras.losses.MeanSquaredError()


@tf.function
def train_step():
    with tf.GradientTape() as tape:
        predictions = tf.cast(model(x), tf.float16) * 250.0
        loss = mse(tf.cast(y, tf.float16), predictions)
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


for _ in range(args.steps):
    train_step()
