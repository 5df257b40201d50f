"""Wide & deep click-through model: categorical embeddings plus log-scaled count features."""
import numpy as np
import tensorflow as tf


class WideDeep(tf.keras.Model):
    def __init__(self, n_items=1000, n_users=500):
        super().__init__()
        self.item = tf.keras.layers.Embedding(n_items, 16)
        self.user = tf.keras.layers.Embedding(n_users, 16)
        self.deep = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(32, activation="relu")])
        self.out = tf.keras.layers.Dense(1, activation="sigmoid", dtype="float32")

    def call(self, features, training=False):
        counts = tf.math.log1p(tf.cast(features["counts"], tf.float32))
        emb = tf.concat([self.item(features["item"]), self.user(features["user"])], axis=-1)
        deep_in = tf.concat([emb, counts], axis=-1)
        return self.out(self.deep(deep_in, training=training))


if __name__ == "__main__":
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(7)
    n = 512
    features = {
        "item": rng.integers(0, 1000, n),
        "user": rng.integers(0, 500, n),
        "counts": rng.poisson(30, size=(n, 4)).astype("int64"),
    }
    clicks = rng.integers(0, 2, size=(n, 1)).astype("float32")
    model = WideDeep()
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["AUC"])
    model.fit(features, clicks, batch_size=128, epochs=1, verbose=2)
