"""Keras 3 image classifier fed by a tf.data pipeline that decodes to uint8, augments, and converts
to float16 in [0, 1] on the host (half the bytes per batch) for the mixed_float16 model."""
import numpy as np
import tensorflow as tf
import keras

IMG = 32


def to_half(image, label):
    image = tf.image.random_flip_left_right(image)
    image = tf.cast(image, tf.float16) / 255.0
    return image, label


def make_pipeline(n=1024, seed=9, batch=32):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 5, size=n)
    images = rng.integers(0, 120, size=(n, IMG, IMG, 3)).astype("uint8")
    for k in range(5):
        images[labels == k, :, :, k % 3] += np.uint8(25 * (k + 1))
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(n, seed=seed)
    return ds.map(to_half, num_parallel_calls=tf.data.AUTOTUNE).batch(batch).prefetch(2)


def build_model():
    inputs = keras.Input((IMG, IMG, 3), dtype="float16")
    h = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Conv2D(64, 3, strides=2, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    h = keras.layers.Dense(5)(h)
    outputs = keras.layers.Activation("softmax", dtype="float32")(h)
    return keras.Model(inputs, outputs)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(make_pipeline(), epochs=3, verbose=2)


if __name__ == "__main__":
    main()
