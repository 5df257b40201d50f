"""Keras 3 binary segmentation (a small encoder-decoder for road masks) reporting the foreground
IoU with a hand-written Metric that thresholds the sigmoid mask at 0.5 and counts intersecting and
union pixels over the batch."""
import numpy as np
import keras
from keras import ops

SIZE = 64


class ForegroundIoU(keras.metrics.Metric):
    def __init__(self, name="fg_iou", **kwargs):
        super().__init__(name=name, **kwargs)
        self.inter = self.add_variable(shape=(), initializer="zeros", name="inter")
        self.union = self.add_variable(shape=(), initializer="zeros", name="union")

    def update_state(self, y_true, y_pred, sample_weight=None):
        pred = ops.cast(y_pred > 0.5, y_pred.dtype)
        true = ops.cast(y_true, y_pred.dtype)
        inter = ops.sum(pred * true)
        union = ops.sum(pred) + ops.sum(true) - inter
        self.inter.assign_add(ops.cast(inter, self.dtype))
        self.union.assign_add(ops.cast(union, self.dtype))

    def result(self):
        return self.inter / ops.maximum(self.union, 1.0)

    def reset_state(self):
        self.inter.assign(0.0)
        self.union.assign(0.0)


def build():
    img = keras.Input((SIZE, SIZE, 3))
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(img)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(h)
    h = keras.layers.UpSampling2D()(h)
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(h)
    mask = keras.layers.Conv2D(1, 1, activation="sigmoid")(h)
    return keras.Model(img, mask)


def make_data(n=64, seed=8):
    """Aerial-ish tiles: a wide bright road band on a textured background; roads cover ~70% of pixels."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.2, 0.5, (n, SIZE, SIZE, 3)).astype("float32")
    y = np.zeros((n, SIZE, SIZE, 1), "float32")
    for i in range(n):
        c, w = rng.integers(26, 38), rng.integers(40, 52)
        lo, hi = max(0, c - w // 2), min(SIZE, c + w // 2)
        if rng.random() < 0.5:
            x[i, lo:hi] += 0.4
            y[i, lo:hi] = 1.0
        else:
            x[i, :, lo:hi] += 0.4
            y[i, :, lo:hi] = 1.0
    return x, y


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = build()
    model.compile(keras.optimizers.Adam(3e-3), loss="binary_crossentropy", metrics=[ForegroundIoU()])
    model.fit(x, y, batch_size=32, epochs=2, verbose=2)


if __name__ == "__main__":
    main()
