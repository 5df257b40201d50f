"""tf_keras image-patch model with a ZCA whitening layer computed from each batch's covariance
(decorrelated features before the classifier, as in whitening-based self-supervision)."""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf
import tf_keras as keras


class BatchWhitening(keras.layers.Layer):
    def __init__(self, epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def call(self, x):
        x = x - tf.reduce_mean(x, axis=0, keepdims=True)
        n = tf.cast(tf.shape(x)[0], x.dtype)
        cov = tf.matmul(x, x, transpose_a=True) / n
        eigvals, eigvecs = tf.linalg.eigh(cov + self.epsilon * tf.eye(tf.shape(x)[1], dtype=x.dtype))
        whiten = eigvecs @ tf.linalg.diag(tf.math.rsqrt(eigvals)) @ tf.transpose(eigvecs)
        return x @ whiten


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2048, 48)).astype("float32")
    y = (x[:, :8].sum(axis=1) > 0).astype("int32")
    model = keras.Sequential([
        keras.Input((48,)),
        keras.layers.Dense(16),
        BatchWhitening(),
        keras.layers.Dense(2),
        keras.layers.Activation("softmax", dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=128, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
