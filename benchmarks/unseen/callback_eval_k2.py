"""tf_keras regression on standardized targets; a custom Callback reports validation RMSE in raw units."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


class RawUnitsRMSE(keras.callbacks.Callback):
    def __init__(self, x_val, y_val, mean, std):
        super().__init__()
        self.x_val, self.y_val = x_val, y_val
        self.mean, self.std = mean, std

    def on_epoch_end(self, epoch, logs=None):
        preds = self.model(self.x_val, training=False) * self.std + self.mean
        err = preds - tf.cast(self.y_val, preds.dtype)
        rmse = tf.sqrt(tf.reduce_mean(tf.square(err)))
        logs = logs if logs is not None else {}
        logs["val_rmse"] = float(rmse)
        print(f"epoch {epoch}: val_rmse {float(rmse):.2f}")


def build():
    inputs = keras.Input((12,))
    h = keras.layers.Dense(64, activation="relu")(inputs)
    h = keras.layers.Dense(64, activation="relu")(h)
    out = keras.layers.Dense(1)(h)
    model = keras.Model(inputs, out)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    return model


if __name__ == "__main__":
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1024, 12)).astype("float32")
    y = (2500.0 + 600.0 * x[:, :1] + 150.0 * rng.normal(size=(1024, 1))).astype("float32")
    mean, std = float(y[:768].mean()), float(y[:768].std())
    model = build()
    callback = RawUnitsRMSE(x[768:], y[768:], mean, std)
    model.fit(x[:768], (y[:768] - mean) / std, epochs=2, batch_size=64, verbose=2, callbacks=[callback])
