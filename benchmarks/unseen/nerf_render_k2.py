"""tf_keras tiny NeRF-style renderer fitted to rays of a synthetic scene (a coloured sphere in front of
a white background): a positional-encoded MLP gives colour and density at points along each ray, and
the volume-rendering quadrature of Mildenhall et al. 2020 composites them, the last interval of each
ray being 'infinite' (1e10) so that whatever is left of the ray is absorbed there."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
from tensorflow import keras

SAMPLES = 48
NEAR, FAR = 2.0, 6.0
BANDS = 6


def posenc(x):
    feats = [x]
    for i in range(BANDS):
        feats += [tf.sin(2.0 ** i * x), tf.cos(2.0 ** i * x)]
    return tf.concat(feats, -1)


class VolumeRenderer(keras.layers.Layer):
    def __init__(self, width=128, **kwargs):
        super().__init__(**kwargs)
        self.mlp = keras.Sequential([
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(4),
        ])

    def call(self, rays):
        origins, dirs = rays[:, :3], rays[:, 3:]
        t = tf.cast(tf.linspace(NEAR, FAR, SAMPLES), origins.dtype)
        pts = origins[:, None, :] + dirs[:, None, :] * t[None, :, None]
        raw = self.mlp(posenc(pts))
        rgb = tf.sigmoid(raw[..., :3])
        sigma = tf.nn.relu(raw[..., 3])
        dists = tf.broadcast_to(t[1:] - t[:-1], tf.shape(sigma[:, 1:]))
        dists = tf.concat([dists, 1e10 * tf.ones_like(sigma[:, :1])], axis=-1)
        dists = dists * tf.norm(dirs, axis=-1, keepdims=True)
        alpha = 1.0 - tf.exp(-sigma * dists)
        trans = tf.math.cumprod(1.0 - alpha + 1e-10, axis=-1, exclusive=True)
        weights = alpha * trans
        return tf.reduce_sum(weights[..., None] * rgb, axis=1) + (1.0 - tf.reduce_sum(weights, -1, keepdims=True))


def make_rays(n=8192, seed=0):
    """Rays from cameras on a circle of radius 4 looking at a unit sphere at the origin: red where they hit."""
    rng = np.random.default_rng(seed)
    ang = rng.uniform(0, 2 * np.pi, n)
    origins = np.stack([4 * np.cos(ang), 4 * np.sin(ang), rng.uniform(-0.5, 0.5, n)], -1)
    target = np.stack([rng.uniform(-1.5, 1.5, n), rng.uniform(-1.5, 1.5, n), rng.uniform(-1.5, 1.5, n)], -1)
    dirs = target - origins
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
    b = np.sum(origins * dirs, -1)
    hit = b * b - (np.sum(origins ** 2, -1) - 1.0) >= 0
    colour = np.where(hit[:, None], [[0.9, 0.2, 0.1]], [[1.0, 1.0, 1.0]])
    return np.concatenate([origins, dirs], -1).astype("float32"), colour.astype("float32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rays, colour = make_rays()
    inp = keras.Input((6,))
    out = VolumeRenderer()(inp)
    out = keras.layers.Activation("linear", dtype="float32")(out)
    model = keras.Model(inp, out)
    model.compile(keras.optimizers.Adam(5e-4), loss="mse")
    model.fit(rays, colour, batch_size=256, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
