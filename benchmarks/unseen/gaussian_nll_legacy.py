"""Heteroscedastic regression (mean and scale heads) on Keras 2 via TF_USE_LEGACY_KERAS, custom loop."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.keras.mixed_precision.set_global_policy("mixed_float16")

inputs = tf.keras.Input((8,))
hidden = tf.keras.layers.Dense(64, activation="relu")(inputs)
mu = tf.keras.layers.Dense(1, name="mu")(hidden)
raw_scale = tf.keras.layers.Dense(1, name="scale")(hidden)
model = tf.keras.Model(inputs, [mu, raw_scale])
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))


def nll(y, mean, raw):
    sigma = tf.nn.softplus(raw) + 1e-3
    y = tf.cast(y, mean.dtype)
    return tf.reduce_mean(tf.math.log(sigma) + 0.5 * ((y - mean) / sigma) ** 2)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        mean, raw = model(x, training=True)
        loss = tf.cast(nll(y, mean, raw), tf.float32)
        scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(25)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (80.0 * x[:, :1] + 10.0 * rng.normal(size=(256, 1))).astype("float32")
    for i in range(6):
        print(i, float(train_step(x, y)))
