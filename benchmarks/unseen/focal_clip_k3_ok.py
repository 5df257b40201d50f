"""Keras 3 defect detector on inspection-sensor summaries, trained with a binary focal loss written as a
keras.losses.Loss subclass (rare positives); mixed_float16 for the larger production model."""
import numpy as np
import keras
from keras import ops


class BinaryFocalLoss(keras.losses.Loss):
    def __init__(self, gamma=2.0, alpha=0.25, name="binary_focal_loss"):
        super().__init__(name=name)
        self.gamma = gamma
        self.alpha = alpha

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, y_pred.dtype)
        epsilon = keras.config.epsilon()
        p = ops.clip(y_pred, epsilon, 1.0 - epsilon)
        pos = -self.alpha * y_true * ops.power(1.0 - p, self.gamma) * ops.log(p)
        neg = -(1.0 - self.alpha) * (1.0 - y_true) * ops.power(p, self.gamma) * ops.log(1.0 - p)
        return ops.mean(pos + neg, axis=-1)


def make_data(n=8192, seed=4):
    rng = np.random.default_rng(seed)
    y = (rng.uniform(size=n) < 0.05).astype("float32")
    vibration = rng.gamma(2.0, 2.0, n) * (1.0 + 3.0 * y)
    temperature = rng.normal(40.0, 3.0, n) + 6.0 * y
    x = np.stack([np.log1p(vibration), temperature / 10.0, rng.normal(size=n)], axis=1).astype("float32")
    return x, y[:, None]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = keras.Sequential([
        keras.Input((3,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1, activation="sigmoid"),
    ])
    model.compile(keras.optimizers.Adam(3e-3), BinaryFocalLoss(), metrics=[keras.metrics.AUC()])
    model.fit(x, y, batch_size=256, epochs=4, verbose=2)


if __name__ == "__main__":
    main()
