"""tf_keras fit under MirroredStrategy with a callback that logs the dynamic loss scale each epoch
and a hand-written loss that computes in float32 with an epsilon."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras


class LossScaleLogger(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        scale = float(self.model.optimizer.loss_scale)
        print(f"epoch {epoch}: loss scale {scale:.0f}")
        if logs is not None:
            logs["loss_scale"] = scale


def weighted_bce(y_true, y_pred):
    y_true = tf.cast(y_true, tf.float32)
    y_pred = tf.clip_by_value(tf.cast(y_pred, tf.float32), 1e-7, 1.0 - 1e-7)
    loss = -(3.0 * y_true * tf.math.log(y_pred) + (1.0 - y_true) * tf.math.log(1.0 - y_pred))
    return tf.reduce_mean(loss, axis=-1)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(12)
    x = rng.normal(size=(4096, 30)).astype("float32")
    y = (x[:, :5].sum(axis=1, keepdims=True) > 1.5).astype("float32")
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((30,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1),
            keras.layers.Activation("sigmoid", dtype="float32"),
        ])
        model.compile(keras.optimizers.Adam(1e-3), loss=weighted_bce, metrics=["accuracy"])
    model.fit(x, y, batch_size=128, epochs=3, verbose=2, callbacks=[LossScaleLogger()])


if __name__ == "__main__":
    main()
