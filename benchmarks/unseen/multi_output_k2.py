"""tf_keras listing model with two outputs: a category (softmax) and a rental price (regression)."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")
N_CATEGORIES = 6


def build_model(n_features):
    features = keras.Input((n_features,), name="features")
    h = keras.layers.Dense(128, activation="relu")(features)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Dense(64, activation="relu")(h)
    category = keras.layers.Dense(N_CATEGORIES)(h)
    category = keras.layers.Activation("softmax", dtype="float32", name="category")(category)
    price = keras.layers.Dense(1, name="price")(h)
    return keras.Model(features, {"category": category, "price": price})


def make_dataset(rng, n=2048):
    x = rng.normal(size=(n, 20)).astype("float32")
    category = (x[:, :N_CATEGORIES]).argmax(axis=1)
    price = (900.0 + 250.0 * category + 120.0 * x[:, 10] ** 2).astype("float32")[:, None]
    ds = tf.data.Dataset.from_tensor_slices((x, {"category": category, "price": price}))
    return ds.shuffle(n, seed=1).batch(64).prefetch(tf.data.AUTOTUNE)


model = build_model(20)
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss={"category": "sparse_categorical_crossentropy", "price": "mse"},
    loss_weights={"category": 1.0, "price": 1e-4},
    metrics={"category": "accuracy", "price": "mae"},
)
history = model.fit(make_dataset(np.random.default_rng(1)), epochs=3, verbose=2)
print({k: [round(v, 3) for v in vals] for k, vals in history.history.items()})
