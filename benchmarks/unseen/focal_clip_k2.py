"""tf_keras card-fraud alert model trained with a binary focal loss (Lin et al. 2017) written as a Loss
subclass, for a label with ~5% positives. Transaction features come in their raw scale."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras


class BinaryFocalLoss(keras.losses.Loss):
    def __init__(self, gamma=2.0, alpha=0.25, name="binary_focal_loss"):
        super().__init__(name=name)
        self.gamma = gamma
        self.alpha = alpha

    def call(self, y_true, y_pred):
        y_true = tf.cast(y_true, y_pred.dtype)
        epsilon = keras.backend.epsilon()
        p = tf.clip_by_value(y_pred, epsilon, 1.0 - epsilon)
        pos = -self.alpha * y_true * tf.pow(1.0 - p, self.gamma) * tf.math.log(p)
        neg = -(1.0 - self.alpha) * (1.0 - y_true) * tf.pow(p, self.gamma) * tf.math.log(1.0 - p)
        return tf.reduce_mean(pos + neg, axis=-1)


def make_data(n=8192, seed=3):
    rng = np.random.default_rng(seed)
    y = (rng.uniform(size=n) < 0.05).astype("float32")
    amount = rng.lognormal(3.0, 1.0, n) * (1.0 + 4.0 * y)
    hour = rng.integers(0, 24, n) + 0.0
    velocity = rng.poisson(2.0 + 6.0 * y)
    x = np.stack([amount, hour, velocity, rng.normal(size=n)], axis=1).astype("float32")
    return x, y[:, None]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1, activation="sigmoid"),
    ])
    model.compile(keras.optimizers.Adam(3e-3), BinaryFocalLoss(), metrics=[keras.metrics.AUC()])
    model.fit(x, y, batch_size=256, epochs=4, verbose=2)


if __name__ == "__main__":
    main()
