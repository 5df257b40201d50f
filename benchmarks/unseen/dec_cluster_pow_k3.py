"""Deep embedded clustering (Keras 3): an encoder's codes are soft-assigned to learned centroids
with a Student's t kernel whose degrees of freedom are learned too (kept in float32), then
sharpened into DEC's target distribution and trained with KL divergence."""
import numpy as np
import tensorflow as tf
import keras

CLUSTERS = 4
CODE = 8


class StudentTAssignment(keras.layers.Layer):
    def __init__(self, n_clusters, **kwargs):
        super().__init__(**kwargs)
        self.n_clusters = n_clusters

    def build(self, input_shape):
        self.centroids = self.add_weight(shape=(self.n_clusters, input_shape[-1]),
                                         initializer="glorot_uniform", name="centroids")
        self.dof = self.add_weight(shape=(), initializer=keras.initializers.Constant(1.0),
                                   name="dof", autocast=False)

    def call(self, z):
        dist = tf.reduce_sum(tf.square(z[:, None, :] - self.centroids[None, :, :]), axis=-1)
        dof = tf.cast(self.dof, dist.dtype)
        q = (1.0 + dist / dof) ** (-(self.dof + 1.0) / 2.0)
        return q / tf.reduce_sum(q, axis=1, keepdims=True)


def target_distribution(q):
    weight = q ** 2 / np.sum(q, axis=0)
    return (weight.T / np.sum(weight, axis=1)).T


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=3.0, size=(CLUSTERS, 20))
    x = (centers[rng.integers(0, CLUSTERS, 2048)] + rng.normal(size=(2048, 20))).astype("float32")
    inputs = keras.Input((20,))
    h = keras.layers.Dense(64, activation="relu")(inputs)
    z = keras.layers.Dense(CODE)(h)
    q = StudentTAssignment(CLUSTERS, dtype="mixed_float16")(z)
    q = keras.layers.Activation("linear", dtype="float32")(q)
    model = keras.Model(inputs, q)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.KLDivergence())
    for it in range(3):
        p = target_distribution(model.predict(x, verbose=0))
        history = model.fit(x, p, batch_size=128, epochs=1, verbose=0)
        print("round", it, "kl", history.history["loss"][-1])


if __name__ == "__main__":
    main()
