"""Keras 3 transformer encoder for sensor sequences whose normalisation and pooling run in float32
islands inside float16 layers, cast back to the layer's compute dtype."""
import numpy as np
import tensorflow as tf
import keras
from keras import ops


class RMSNorm(keras.layers.Layer):
    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.gain = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="gain")

    def call(self, x):
        x32 = ops.cast(x, "float32")
        ms = ops.mean(ops.square(x32), axis=-1, keepdims=True)
        y = x32 * ops.rsqrt(ms + self.epsilon) * ops.cast(self.gain, "float32")
        return ops.cast(y, self.compute_dtype)


class AttentionPool(keras.layers.Layer):
    def build(self, input_shape):
        self.score = keras.layers.Dense(1)
        self.score.build(input_shape)

    def call(self, x):
        logits = tf.cast(self.score(x), tf.float32)
        weights = tf.nn.softmax(logits, axis=1)
        return tf.reduce_sum(tf.cast(weights, x.dtype) * x, axis=1)


def build_model(steps=64, channels=6, dim=48):
    inputs = keras.Input((steps, channels))
    h = keras.layers.Dense(dim)(inputs)
    attn = keras.layers.MultiHeadAttention(num_heads=4, key_dim=dim // 4)(h, h)
    h = RMSNorm()(h + attn)
    ff = keras.layers.Dense(dim)(keras.layers.Dense(2 * dim, activation="gelu")(h))
    h = RMSNorm()(h + ff)
    pooled = AttentionPool()(h)
    outputs = keras.layers.Dense(4, activation="softmax", dtype="float32")(pooled)
    return keras.Model(inputs, outputs)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(6)
    y = rng.integers(0, 4, size=1024)
    x = rng.normal(size=(1024, 64, 6)).astype("float32")
    x[:, :, 0] += np.sin(np.arange(64) * (y[:, None] + 1) * 0.2)
    model = build_model()
    model.compile(optimizer=keras.optimizers.AdamW(2e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=32, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
