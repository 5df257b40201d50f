"""tf_keras value network for a trading simulator: observations pass through a running-statistics
normaliser kept in float32 (the layer is built with dtype="float32"), the trunk computes in mixed_float16."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras


class RunningNormalizer(keras.layers.Layer):
    def build(self, input_shape):
        dim = input_shape[-1]
        self.count = self.add_weight("count", shape=(), initializer="zeros", trainable=False)
        self.mean = self.add_weight("mean", shape=(dim,), initializer="zeros", trainable=False)
        self.m2 = self.add_weight("m2", shape=(dim,), initializer="zeros", trainable=False)

    def call(self, x, training=None):
        if training:
            n = tf.cast(tf.shape(x)[0], x.dtype)
            batch_mean = tf.reduce_mean(x, axis=0)
            batch_m2 = tf.reduce_sum(tf.square(x - batch_mean), axis=0)
            total = self.count + n
            delta = batch_mean - self.mean
            self.mean.assign(self.mean + delta * n / total)
            self.m2.assign(self.m2 + batch_m2 + tf.square(delta) * self.count * n / total)
            self.count.assign(total)
        variance = self.m2 / tf.maximum(self.count - 1.0, 1.0)
        return tf.clip_by_value((x - self.mean) / tf.sqrt(variance + 1e-2), -5.0, 5.0)


def make_data(n=32768, seed=12):
    rng = np.random.default_rng(seed)
    prices = rng.lognormal(4.0, 0.3, (n, 4))
    spreads = rng.gamma(2.0, 0.05, (n, 4))
    position = rng.integers(-10, 11, (n, 1))
    obs = np.concatenate([prices, spreads, position], axis=1).astype("float32")
    value = (np.log(prices[:, :1] / prices[:, 1:2]) * position - spreads[:, :1]).astype("float32")
    return obs, value


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    obs, value = make_data()
    model = keras.Sequential([
        keras.Input((9,)),
        RunningNormalizer(dtype="float32"),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    model.fit(obs, value, batch_size=512, epochs=4, verbose=2)


if __name__ == "__main__":
    main()
