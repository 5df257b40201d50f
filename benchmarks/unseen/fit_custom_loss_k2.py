"""Keras 2 (tf_keras) image classifier trained with fit and a hand-written cross-entropy."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")

NUM_CLASSES = 10


def smoothed_crossentropy(y_true, y_pred, smoothing=0.1):
    y_true = y_true * (1.0 - smoothing) + smoothing / NUM_CLASSES
    return -tf.reduce_sum(y_true * tf.math.log(y_pred), axis=-1)


def make_model():
    return keras.Sequential(
        [
            keras.layers.Conv2D(16, 3, activation="relu", input_shape=(28, 28, 1)),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(NUM_CLASSES, activation="softmax"),
        ]
    )


if __name__ == "__main__":
    rng = np.random.default_rng(3)
    images = rng.uniform(size=(128, 28, 28, 1)).astype("float32")
    labels = keras.utils.to_categorical(rng.integers(0, NUM_CLASSES, size=128), NUM_CLASSES)
    model = make_model()
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss=smoothed_crossentropy, metrics=["accuracy"])
    model.fit(images, labels, batch_size=32, epochs=1, steps_per_epoch=4, verbose=2)
