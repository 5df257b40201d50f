"""tf_keras visuomotor policy with a spatial-softmax keypoint bottleneck (Levine et al. 2016): each
feature map becomes a softmax over its H*W positions with a learned temperature, written out by hand
(max subtracted first), and its expected image coordinates feed an MLP that regresses the action."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as keras

SIZE = 32


class SpatialSoftmax(keras.layers.Layer):
    """(B, H, W, C) -> (B, 2C) expected (x, y) per channel."""

    def build(self, input_shape):
        self.temperature = self.add_weight(name="temperature", shape=(), initializer="ones")

    def call(self, features):
        shape = tf.shape(features)
        h, w, c = features.shape[1], features.shape[2], features.shape[3]
        logits = tf.reshape(tf.transpose(features, [0, 3, 1, 2]), [shape[0], c, h * w]) / self.temperature
        logits = logits - tf.reduce_max(logits, axis=-1, keepdims=True)
        weights = tf.exp(logits)
        weights = weights / tf.reduce_sum(weights, axis=-1, keepdims=True)
        ys, xs = tf.meshgrid(tf.linspace(-1.0, 1.0, h), tf.linspace(-1.0, 1.0, w), indexing="ij")
        grid = tf.cast(tf.stack([tf.reshape(xs, [-1]), tf.reshape(ys, [-1])], axis=-1), weights.dtype)
        keypoints = tf.matmul(weights, grid)
        return tf.reshape(keypoints, [shape[0], 2 * c])


def build():
    image = keras.Input((SIZE, SIZE, 3))
    h = keras.layers.Conv2D(16, 5, padding="same", activation="relu")(image)
    h = keras.layers.Conv2D(8, 3, padding="same")(h)
    h = SpatialSoftmax()(h)
    h = keras.layers.Dense(64, activation="relu")(h)
    return keras.Model(image, keras.layers.Dense(2, dtype="float32")(h))


def make_episodes(n=384, seed=13):
    """A red target on clutter; the action is the displacement from the image centre to it."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 0.3, (n, SIZE, SIZE, 3)).astype("float32")
    pos = rng.integers(3, SIZE - 3, (n, 2))
    for i, (r, c) in enumerate(pos):
        x[i, r - 2:r + 3, c - 2:c + 3] = (1.0, 0.1, 0.1)
    action = ((pos[:, ::-1] - SIZE / 2) / (SIZE / 2)).astype("float32")
    return x, action


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_episodes()
    model = build()
    model.compile(keras.optimizers.Adam(2e-3), loss="mse")
    model.fit(x, y, batch_size=32, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
