"""Keras 3, keras.ops only: image retrieval backbone with generalized-mean (GeM) pooling and a learned p."""
import numpy as np
import keras
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")


class GeMPooling(layers.Layer):
    def __init__(self, p=3.0, eps=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.init_p, self.eps = p, eps

    def build(self, input_shape):
        self.p = self.add_weight(shape=(), initializer=keras.initializers.Constant(self.init_p), name="p")

    def call(self, x):
        x = ops.maximum(x, self.eps)
        pooled = ops.mean(ops.power(x, self.p), axis=(1, 2))
        return ops.power(pooled, 1.0 / self.p)


def build(num_classes=20):
    inputs = keras.Input((64, 64, 3))
    h = layers.Conv2D(32, 3, strides=2, activation="relu")(inputs)
    h = layers.Conv2D(64, 3, strides=2, activation="relu")(h)
    h = GeMPooling()(h)
    outputs = layers.Dense(num_classes, activation="softmax", dtype="float32")(h)
    return keras.Model(inputs, outputs)


if __name__ == "__main__":
    rng = np.random.default_rng(4)
    images = rng.integers(0, 256, size=(256, 64, 64, 3)).astype("float32")
    labels = rng.integers(0, 20, size=(256,))
    model = build()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(images, labels, batch_size=32, epochs=1, verbose=2)
