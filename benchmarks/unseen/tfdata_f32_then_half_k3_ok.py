"""Keras 3 tabular regression from a tf.data pipeline: features are standardised in float32 with
statistics from the training set, and only the standardised tensor is shipped as float16."""
import numpy as np
import tensorflow as tf
import keras

FEATURES = 12


def make_pipeline(n=4096, seed=8):
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(mean=6.0, sigma=1.0, size=(n, FEATURES)).astype("float32")
    raw[rng.random(n) < 0.05] = 0.0
    target = (np.log1p(raw[:, :3]).sum(axis=1) / 10.0).astype("float32")
    mean, std = raw.mean(axis=0), raw.std(axis=0)

    def standardize(x, y):
        x = (x - mean) / (std + 1e-8)
        return tf.cast(x, tf.float16), y

    ds = tf.data.Dataset.from_tensor_slices((raw, target))
    return ds.map(standardize, num_parallel_calls=tf.data.AUTOTUNE).shuffle(n, seed=seed).batch(64)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([
        keras.Input((FEATURES,), dtype="float16"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    model.fit(make_pipeline(), epochs=3, verbose=2)


if __name__ == "__main__":
    main()
