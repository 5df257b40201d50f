"""Keras 3 review classifier: TextVectorization, masked embeddings, a masked max-pool layer."""
import numpy as np
import keras
import tensorflow as tf
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")


class MaskedMaxPool(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, x, mask=None):
        if mask is None:
            return ops.max(x, axis=1)
        keep = ops.cast(ops.expand_dims(mask, -1), x.dtype)
        return ops.max(x + (1.0 - keep) * -1e9, axis=1)

    def compute_mask(self, inputs, mask=None):
        return None


def build(vocab_size, length=40):
    ids = keras.Input((length,), dtype="int64")
    h = layers.Embedding(vocab_size, 64, mask_zero=True)(ids)
    h = layers.Bidirectional(layers.LSTM(32, return_sequences=True))(h)
    h = MaskedMaxPool()(h)
    out = layers.Dense(1, activation="sigmoid", dtype="float32")(h)
    return keras.Model(ids, out)


if __name__ == "__main__":
    rng = np.random.default_rng(8)
    words = ["good", "bad", "plot", "actor", "boring", "great", "movie", "long", "fun", "awful"]
    reviews = np.array([" ".join(rng.choice(words, size=rng.integers(3, 30))) for _ in range(256)])
    labels = rng.integers(0, 2, size=(256, 1)).astype("float32")
    vectorizer = layers.TextVectorization(max_tokens=200, output_sequence_length=40)
    vectorizer.adapt(reviews)
    data = tf.data.Dataset.from_tensor_slices((reviews, labels)).batch(32).map(lambda t, y: (vectorizer(t), y))
    model = build(vectorizer.vocabulary_size())
    model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
    model.fit(data, epochs=1, verbose=2)
