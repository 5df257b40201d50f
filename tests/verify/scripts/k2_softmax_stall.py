"""Keras 2 (run with TF_USE_LEGACY_KERAS=1) `fit` of a cosine-similarity classifier with
a hand-written, temperature-scaled softmax under mixed_float16.

exp(cos / 0.1) stays below float16's max (65504) element by element, but the sum over
1000 classes overflows to inf: every probability becomes 0 and the hand-written
cross-entropy gives a finite, frozen loss (-log of the epsilon) whose gradient 1/1e-7
overflows float16 even at loss scale 1. The loss scaler skips every step and halves its
scale down to its floor of 1.0: training silently stalls without a single NaN loss."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("mixed_float16")
CLASSES = 1000
TEMPERATURE = 0.1


def manual_softmax(logits):
    e = tf.exp(logits)
    return e / tf.reduce_sum(e, axis=-1, keepdims=True)


def crossentropy(labels, probs):
    picked = tf.gather(probs, tf.cast(tf.reshape(labels, [-1]), tf.int32), batch_dims=1)
    return -tf.math.log(picked + 1e-7)


class CosineClassifier(keras.layers.Layer):
    def build(self, input_shape):
        self.prototypes = self.add_weight(
            name="prototypes",
            shape=(input_shape[-1], CLASSES),
            initializer=keras.initializers.RandomUniform(0.0, 1.0),
        )

    def call(self, h):
        h = h / tf.norm(h, axis=-1, keepdims=True)
        w = self.prototypes / tf.norm(self.prototypes, axis=0, keepdims=True)
        return manual_softmax(tf.matmul(h, w) / TEMPERATURE)


rng = np.random.default_rng(3)
x = rng.normal(size=(512, 16)).astype("float32")
y = rng.integers(0, CLASSES, size=(512,)).astype("int64")

model = keras.Sequential(
    [keras.layers.Dense(32, activation="softplus", input_shape=(16,)), CosineClassifier()]
)
model.compile(optimizer=keras.optimizers.SGD(0.01), loss=crossentropy)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0)
print("trained")
