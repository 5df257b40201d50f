"""Keras 3 deep clustering head in keras.ops: Student's t soft assignment with a fixed degree of
freedom, computed on float32 codes (the encoder's float16 output is cast first)."""
import numpy as np
import keras
from keras import ops

CLUSTERS = 5
ALPHA = 1.0


class SoftAssignment(keras.layers.Layer):
    def __init__(self, n_clusters, alpha=ALPHA, **kwargs):
        super().__init__(**kwargs)
        self.n_clusters, self.alpha = n_clusters, alpha

    def build(self, input_shape):
        self.centroids = self.add_weight(shape=(self.n_clusters, input_shape[-1]),
                                         initializer="glorot_uniform", name="centroids")

    def call(self, z):
        z = ops.cast(z, "float32")
        dist = ops.sum(ops.square(ops.expand_dims(z, 1) - self.centroids), axis=-1)
        q = ops.power(1.0 + dist / self.alpha, -(self.alpha + 1.0) / 2.0)
        return q / ops.sum(q, axis=1, keepdims=True)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(9)
    centers = rng.normal(scale=3.0, size=(CLUSTERS, 16))
    labels = rng.integers(0, CLUSTERS, 2048)
    x = (centers[labels] + rng.normal(size=(2048, 16))).astype("float32")
    inputs = keras.Input((16,))
    z = keras.layers.Dense(8)(keras.layers.Dense(64, activation="relu")(inputs))
    q = SoftAssignment(CLUSTERS, dtype="float32")(z)
    model = keras.Model(inputs, q)
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.KLDivergence())
    target = keras.utils.to_categorical(labels, CLUSTERS) * 0.9 + 0.1 / CLUSTERS
    model.fit(x, target, batch_size=128, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
