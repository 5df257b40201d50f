"""Keras 3 behaviour-cloning policy for a simulated arm: observations are normalised by a layer that keeps
running statistics over everything seen in training (Welford's parallel update), as RL code bases do."""
import numpy as np
import keras
from keras import ops


class RunningNormalizer(keras.layers.Layer):
    def build(self, input_shape):
        dim = input_shape[-1]
        self.count = self.add_weight(shape=(), initializer="zeros", trainable=False, name="count")
        self.mean = self.add_weight(shape=(dim,), initializer="zeros", trainable=False, name="mean")
        self.m2 = self.add_weight(shape=(dim,), initializer="zeros", trainable=False, name="m2")

    def call(self, x, training=False):
        if training:
            n = ops.cast(ops.shape(x)[0], x.dtype)
            batch_mean = ops.mean(x, axis=0)
            batch_m2 = ops.sum(ops.square(x - batch_mean), axis=0)
            total = self.count + n
            delta = batch_mean - self.mean
            self.mean.assign(self.mean + delta * n / total)
            self.m2.assign(self.m2 + batch_m2 + ops.square(delta) * self.count * n / total)
            self.count.assign(total)
        variance = self.m2 / ops.maximum(self.count - 1.0, 1.0)
        return ops.clip((x - self.mean) / ops.sqrt(variance + 1e-2), -5.0, 5.0)


def make_demos(n=32768, seed=11):
    rng = np.random.default_rng(seed)
    joints = rng.normal(0.0, 1.2, (n, 6))
    velocities = rng.normal(0.0, 3.0, (n, 6))
    target = rng.normal([0.4, 0.0, 0.3], 0.1, (n, 3))
    obs = np.concatenate([joints, velocities, target], axis=1).astype("float32")
    action = (np.tanh(joints[:, :3] - target) - 0.1 * velocities[:, :3]).astype("float32")
    return obs, action


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    obs, action = make_demos()
    model = keras.Sequential([
        keras.Input((15,)),
        RunningNormalizer(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(3, dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    model.fit(obs, action, batch_size=512, epochs=4, verbose=2)


if __name__ == "__main__":
    main()
