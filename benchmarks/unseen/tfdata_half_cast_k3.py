"""Keras 3 (tf.keras) tabular regression of sale prices; the input pipeline casts to float16 in map()."""
import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")


def to_half(features, price):
    return tf.cast(features, tf.float16), tf.cast(price, tf.float16)


def make_dataset(features, prices, batch_size=64):
    ds = tf.data.Dataset.from_tensor_slices((features, prices))
    return ds.shuffle(1024, seed=0).map(to_half, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size).prefetch(2)


def build_model(n_features):
    inputs = tf.keras.Input((n_features,))
    h = tf.keras.layers.Dense(128, activation="relu")(inputs)
    h = tf.keras.layers.Dense(64, activation="relu")(h)
    outputs = tf.keras.layers.Dense(1, dtype="float32")(h)
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="mae")
    return model


if __name__ == "__main__":
    rng = np.random.default_rng(17)
    features = rng.normal(size=(2048, 16)).astype("float32")
    prices = (180000.0 + 40000.0 * features[:, 0] + 10000.0 * rng.normal(size=2048)).astype("float32")
    model = build_model(16)
    model.fit(make_dataset(features, prices), epochs=2, verbose=2)
