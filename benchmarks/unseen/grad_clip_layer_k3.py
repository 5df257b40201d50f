"""Keras 3 value network with a gradient-clipping identity layer between the shared torso and the
head (as in IMPALA/R2D2-style agents: the backward signal into the torso is clipped to [-1, 1] so
one bad batch cannot wreck the features), written with tf.custom_gradient; trained with fit."""
import numpy as np
import tensorflow as tf
import keras

CLIP = 1.0


@tf.custom_gradient
def clip_backward(x):
    def grad(dy):
        return tf.clip_by_value(dy, -CLIP, CLIP)
    return tf.identity(x), grad


class BackwardClip(keras.layers.Layer):
    def call(self, x):
        return clip_backward(x)


def build(d_in=32):
    obs = keras.Input((d_in,))
    h = keras.layers.Dense(64, activation="relu", name="torso_1")(obs)
    h = keras.layers.Dense(64, activation="relu", name="torso_2")(h)
    h = BackwardClip()(h)
    value = keras.layers.Dense(1, dtype="float32", name="value")(h)
    return keras.Model(obs, value)


def make_data(n=4096, d=32, seed=5):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype("float32")
    w = rng.normal(size=(d, 1)).astype("float32") / np.sqrt(d)
    y = np.tanh(x @ w) + 0.5 * np.sin(x[:, :1] * x[:, 1:2])
    return x, y.astype("float32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = build()
    model.compile(keras.optimizers.SGD(0.02, momentum=0.9), loss="mse")
    before = model.get_layer("torso_1").kernel.numpy().copy()
    model.fit(x, y, batch_size=64, epochs=4, verbose=2)
    moved = np.abs(model.get_layer("torso_1").kernel.numpy() - before).mean()
    print(f"mean |change| of the torso's first kernel: {moved:.2e}")


if __name__ == "__main__":
    main()
