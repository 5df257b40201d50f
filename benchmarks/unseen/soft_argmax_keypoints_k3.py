"""Keras 3 facial-landmark regressor with an integral (soft-argmax) head, Sun et al. 2018: a small
conv net predicts one heatmap per landmark, the spatial softmax is written out in keras.ops with an
inverse temperature BETA, and the landmark is the expected (x, y) under it; L1 loss on coordinates."""
import numpy as np
import keras
from keras import layers, ops

SIZE = 32
N_POINTS = 5
BETA = 8.0


class SoftArgmax2D(layers.Layer):
    """Heatmaps (B, H, W, K) -> expected coordinates (B, K, 2) in [-1, 1]."""

    def call(self, heatmaps):
        h, w = heatmaps.shape[1], heatmaps.shape[2]
        weights = ops.exp(BETA * heatmaps)
        weights = weights / ops.sum(weights, axis=(1, 2), keepdims=True)
        xs = ops.cast(ops.linspace(-1.0, 1.0, w), heatmaps.dtype)
        ys = ops.cast(ops.linspace(-1.0, 1.0, h), heatmaps.dtype)
        x = ops.sum(weights * xs[None, None, :, None], axis=(1, 2))
        y = ops.sum(weights * ys[None, :, None, None], axis=(1, 2))
        return ops.stack([x, y], axis=-1)


def build():
    inp = keras.Input((SIZE, SIZE, 1))
    h = inp
    for filters in (8, 16, 16):
        h = layers.Conv2D(filters, 3, padding="same", activation="relu")(h)
    heatmaps = layers.Conv2D(N_POINTS, 1)(h)
    coords = SoftArgmax2D()(heatmaps)
    return keras.Model(inp, layers.Activation("linear", dtype="float32")(coords))


def make_faces(n=256, seed=4):
    """Blurry blobs at random landmark positions; targets are their (x, y) in [-1, 1]."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:SIZE, :SIZE]
    pts = rng.uniform(-0.8, 0.8, size=(n, N_POINTS, 2)).astype("float32")
    img = np.zeros((n, SIZE, SIZE, 1), "float32")
    for i in range(n):
        for k in range(N_POINTS):
            cx, cy = (pts[i, k] + 1.0) * (SIZE - 1) / 2.0
            img[i, :, :, 0] += (k + 1) / N_POINTS * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 4.0)
    return img * 4.0, pts


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_faces()
    model = build()
    model.compile(keras.optimizers.Adam(1e-3), loss="mae")
    model.fit(x, y, batch_size=32, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
