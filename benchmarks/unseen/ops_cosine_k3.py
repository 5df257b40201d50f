"""Cosine-softmax (normalised-softmax) classifier head written with keras.ops, for product photos.

Features and class weights are L2-normalised, logits = scale * cosine."""
import numpy as np
import keras
from keras import ops


class CosineHead(keras.layers.Layer):
    def __init__(self, classes, scale=16.0, **kwargs):
        super().__init__(**kwargs)
        self.classes, self.scale = classes, scale

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.classes), initializer="glorot_uniform", name="w")

    def call(self, feats):
        feats = feats / ops.norm(feats, axis=-1, keepdims=True)
        w = self.w / ops.norm(self.w, axis=0, keepdims=True)
        return self.scale * ops.matmul(feats, w)


def build_model(classes=6):
    inputs = keras.Input((32, 32, 3))
    h = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Conv2D(64, 3, activation="relu")(h)
    h = keras.layers.GlobalMaxPooling2D()(h)
    h = keras.layers.Dense(256, activation="relu")(h)
    logits = CosineHead(classes)(h)
    outputs = keras.layers.Activation("softmax", dtype="float32")(logits)
    return keras.Model(inputs, outputs)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(2)
    y = rng.integers(0, 6, size=768)
    # pixel values as they come from the JPEG decoder: 0..255
    x = rng.integers(0, 256, size=(768, 32, 32, 3)).astype("float32")
    x[np.arange(768), :, :, y % 3] *= 0.5
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=32, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
