"""tf_keras streaming sensor model: a causal running-mean pooling (cumulative sum over time divided
by the number of steps seen) lets the model emit a prediction at every time step."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras

STEPS = 1500
CHANNELS = 6


class RunningMean(keras.layers.Layer):
    def call(self, x):
        total = tf.math.cumsum(x, axis=1)
        count = tf.cast(tf.range(1, tf.shape(x)[1] + 1), x.dtype)[None, :, None]
        return total / count


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(11)
    regime = rng.integers(0, 2, 512)
    readings = 40.0 + 10.0 * regime[:, None, None] + 5.0 * rng.normal(size=(512, STEPS, CHANNELS))
    inputs = keras.Input((STEPS, CHANNELS))
    h = keras.layers.Dense(32, activation="relu")(inputs)
    h = RunningMean()(h)
    h = keras.layers.Dense(1)(h)
    outputs = keras.layers.Activation("sigmoid", dtype="float32")(h)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(1e-3), "binary_crossentropy", metrics=["accuracy"])
    targets = np.repeat(regime[:, None, None], STEPS, axis=1).astype("float32")
    model.fit(readings.astype("float32"), targets, batch_size=32, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
