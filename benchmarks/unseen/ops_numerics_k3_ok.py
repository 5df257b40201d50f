"""Keras 3 mixture-density regression head: logsumexp, softplus and norms done the safe way."""
import numpy as np
import keras
import tensorflow as tf
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")
K = 5


def mdn_nll(y, params):
    params = ops.cast(params, "float32")
    logits, mu, raw_sigma = ops.split(params, 3, axis=-1)
    sigma = ops.softplus(raw_sigma) + 1e-6
    log_prob = -0.5 * ops.square((y - mu) / sigma) - ops.log(sigma) - 0.5 * np.log(2 * np.pi)
    return -ops.mean(ops.logsumexp(ops.log_softmax(logits, axis=-1) + log_prob, axis=-1))


class FeatureNorm(layers.Layer):
    def call(self, x):
        x32 = ops.cast(x, "float32")
        norm = ops.norm(x32, axis=-1, keepdims=True)
        return ops.cast(x32 / ops.maximum(norm, 1e-6), self.compute_dtype)


inputs = keras.Input((8,))
h = layers.Dense(128, activation="relu")(inputs)
h = FeatureNorm()(h)
h = layers.Dense(128, activation="relu")(h)
model = keras.Model(inputs, layers.Dense(3 * K)(h))
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = mdn_nll(y, model(x, training=True))
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(18)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (np.sin(3 * x[:, :1]) + 0.1 * rng.normal(size=(256, 1))).astype("float32")
    for step in range(8):
        sl = slice(32 * step, 32 * step + 32)
        print(f"step {step} loss {float(train_step(x[sl], y[sl])):.4f}")
