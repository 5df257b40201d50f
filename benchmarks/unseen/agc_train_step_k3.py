"""Keras 3 normaliser-free residual MLP (NFNet-style) for tabular churn prediction: no batch norm, so
the train_step applies adaptive gradient clipping (Brock et al. 2021) - each unit's gradient norm is
capped at CLIP times the norm of its weights - before SGD with momentum."""
import numpy as np
import tensorflow as tf
import keras
from keras import ops

CLIP = 0.01


def unitwise_norm(x):
    if len(x.shape) <= 1:
        return ops.sqrt(ops.sum(ops.square(x)))
    return ops.sqrt(ops.sum(ops.square(x), axis=tuple(range(len(x.shape) - 1)), keepdims=True))


def adaptive_clip(grads, params, eps=1e-3):
    clipped = []
    for g, p in zip(grads, params):
        max_norm = CLIP * ops.maximum(unitwise_norm(p), eps)
        g_norm = unitwise_norm(g)
        scaled = g * (max_norm / ops.maximum(g_norm, 1e-6))
        clipped.append(ops.where(g_norm > max_norm, scaled, g))
    return clipped


class NFResBlock(keras.layers.Layer):
    def __init__(self, width, alpha=0.2, **kwargs):
        super().__init__(**kwargs)
        self.alpha = alpha
        self.fc1 = keras.layers.Dense(width, activation="gelu")
        self.fc2 = keras.layers.Dense(width, kernel_initializer="zeros")

    def call(self, x):
        return x + self.alpha * self.fc2(self.fc1(x))


class AGCModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            scaled_loss = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, self.trainable_variables)
        grads = adaptive_clip(grads, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def build(features=24, width=128, depth=4):
    inp = keras.Input((features,))
    h = keras.layers.Dense(width)(inp)
    for _ in range(depth):
        h = NFResBlock(width)(h)
    out = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(h)
    return AGCModel(inp, out)


def make_customers(n=8000, features=24, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    w = rng.normal(size=features)
    logit = x @ w / 3 + 0.8 * x[:, 0] * x[:, 1] - 1.0
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype("float32")[:, None]
    return x, y


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_customers()
    model = build()
    model.compile(keras.optimizers.SGD(0.05, momentum=0.9), loss="binary_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=256, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
