"""Keras 3 binary classifier on imbalanced data, fit with a focal-loss class (correct)."""
import keras
import numpy as np
from keras import ops

keras.config.set_dtype_policy("mixed_float16")


class BinaryFocalLoss(keras.losses.Loss):
    def __init__(self, gamma=2.0, alpha=0.25, name="binary_focal"):
        super().__init__(name=name)
        self.gamma, self.alpha = gamma, alpha

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, y_pred.dtype)
        p = ops.clip(y_pred, 1e-7, 1.0 - 1e-7)
        p_t = y_true * p + (1.0 - y_true) * (1.0 - p)
        alpha_t = y_true * self.alpha + (1.0 - y_true) * (1.0 - self.alpha)
        return -ops.mean(alpha_t * ops.power(1.0 - p_t, self.gamma) * ops.log(p_t), axis=-1)


def build(features):
    inputs = keras.Input((features,))
    h = keras.layers.Dense(64, activation="relu")(inputs)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Dense(64, activation="relu")(h)
    outputs = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(h)
    return keras.Model(inputs, outputs)


if __name__ == "__main__":
    rng = np.random.default_rng(7)
    x = rng.normal(size=(512, 20)).astype("float32")
    y = (rng.uniform(size=(512, 1)) < 0.05).astype("float32")
    model = build(20)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=BinaryFocalLoss(), metrics=["auc"])
    model.fit(x, y, batch_size=64, epochs=1, steps_per_epoch=4, verbose=2)
