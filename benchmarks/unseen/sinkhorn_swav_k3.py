"""Keras 3 SwAV (Caron et al. 2020) on sensor snippets: two noisy views per sample, an encoder with a
unit-norm projection and a bias-free prototype layer, codes from a few Sinkhorn-Knopp iterations on
the detached prototype scores, swapped prediction loss; a Model subclass with its own train_step."""
import numpy as np
import tensorflow as tf
import keras
from keras import ops

EPSILON = 0.05      # entropy regularisation of the optimal transport (SwAV default)
TEMPERATURE = 0.1
PROTOTYPES = 30


def sinkhorn(scores, iterations=3):
    """Equal-partition soft assignment of a batch to the prototypes."""
    q = ops.exp(scores / EPSILON)
    q = q / ops.sum(q)
    batch, k = ops.shape(q)[0], ops.shape(q)[1]
    for _ in range(iterations):
        q = q / ops.sum(q, axis=0, keepdims=True) / ops.cast(k, q.dtype)
        q = q / ops.sum(q, axis=1, keepdims=True) / ops.cast(batch, q.dtype)
    return q * ops.cast(batch, q.dtype)


class SwAV(keras.Model):
    def __init__(self, dim=48, **kwargs):
        super().__init__(**kwargs)
        self.encoder = keras.Sequential([
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(64),
            keras.layers.UnitNormalization(),
        ])
        self.prototypes = keras.layers.Dense(PROTOTYPES, use_bias=False)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x):
        return self.prototypes(self.encoder(x))

    def train_step(self, data):
        view1, view2 = data
        with tf.GradientTape() as tape:
            s1, s2 = self(view1, training=True), self(view2, training=True)
            q1, q2 = sinkhorn(ops.stop_gradient(s1)), sinkhorn(ops.stop_gradient(s2))
            p1 = ops.log_softmax(ops.cast(s1, "float32") / TEMPERATURE, axis=1)
            p2 = ops.log_softmax(ops.cast(s2, "float32") / TEMPERATURE, axis=1)
            q1, q2 = ops.cast(q1, "float32"), ops.cast(q2, "float32")
            loss = -0.5 * ops.mean(ops.sum(q1 * p2, axis=1) + ops.sum(q2 * p1, axis=1))
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker]


def make_views(n=8192, d=48, seed=2):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(12, d))[rng.integers(0, 12, n)] + 0.3 * rng.normal(size=(n, d))
    noise = lambda: base * rng.uniform(0.8, 1.2, size=(n, 1)) + 0.2 * rng.normal(size=(n, d))
    return noise().astype("float32"), noise().astype("float32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    v1, v2 = make_views()
    model = SwAV()
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9))
    data = tf.data.Dataset.from_tensor_slices((v1, v2)).shuffle(8192).batch(256, drop_remainder=True)
    model.fit(data, epochs=4, verbose=2)


if __name__ == "__main__":
    main()
