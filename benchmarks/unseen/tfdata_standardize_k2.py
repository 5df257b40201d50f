"""Vibration-window classifier (tf_keras). The input pipeline standardises each window and ships it
in half precision to match the mixed_float16 model."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras

WINDOW = 256
CLASSES = 3


def standardize(window, label):
    window = tf.cast(window, tf.float16)
    mean = tf.reduce_mean(window)
    var = tf.reduce_mean(tf.square(window - mean))
    window = (window - mean) / tf.sqrt(var + 1e-8)
    return window[:, None], label


def make_pipeline(n=1536, seed=3, batch=32):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=n)
    t = np.arange(WINDOW) / WINDOW
    freqs = np.array([5.0, 11.0, 23.0])[labels]
    windows = np.sin(2 * np.pi * freqs[:, None] * t[None, :]) + 0.3 * rng.normal(size=(n, WINDOW))
    idle = rng.random(n) < 0.05          # the machine was stopped: the sensor reads exactly 0
    windows[idle] = 0.0
    ds = tf.data.Dataset.from_tensor_slices((windows.astype("float32"), labels))
    return ds.shuffle(n, seed=seed).map(standardize, num_parallel_calls=tf.data.AUTOTUNE).batch(batch)


def build_model():
    inputs = keras.Input((WINDOW, 1))
    h = keras.layers.Conv1D(16, 9, strides=2, activation="relu")(inputs)
    h = keras.layers.Conv1D(32, 9, strides=2, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    h = keras.layers.Dense(CLASSES)(h)
    outputs = keras.layers.Activation("softmax", dtype="float32")(h)
    return keras.Model(inputs, outputs)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(make_pipeline(), epochs=3, verbose=2)


if __name__ == "__main__":
    main()
