"""tf_keras weekly-demand model for a retail chain: one feature matrix per row (store id in column 0, then
price, promotion and seasonality features); a custom layer splits the id column off and embeds it."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras

N_STORES = 6000


class StoreFeatures(keras.layers.Layer):
    def __init__(self, n_stores, dim, **kwargs):
        super().__init__(**kwargs)
        self.embed = keras.layers.Embedding(n_stores, dim)

    def call(self, features):
        store = tf.cast(features[:, 0], tf.int32)
        return tf.concat([self.embed(store), features[:, 1:]], axis=-1)


def make_data(n=60000, seed=21):
    rng = np.random.default_rng(seed)
    store = rng.integers(0, N_STORES, n)
    level = rng.normal(0.0, 1.0, N_STORES)
    price = rng.uniform(0.5, 1.5, n)
    promo = rng.integers(0, 2, n)
    week = rng.integers(0, 52, n)
    season = np.sin(2 * np.pi * week / 52.0)
    demand = level[store] - 0.8 * price + 0.5 * promo + 0.3 * season + 0.05 * rng.normal(size=n)
    x = np.stack([store, price, promo, season], axis=1).astype("float32")
    return x, demand.astype("float32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = keras.Sequential([
        keras.Input((4,)),
        StoreFeatures(N_STORES, 8),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    model.fit(x, y, batch_size=256, epochs=6, verbose=2)


if __name__ == "__main__":
    main()
