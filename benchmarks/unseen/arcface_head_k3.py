"""Keras 3 speaker-verification embedding trained with an ArcFace additive angular margin head
(Deng et al. 2019): the head L2-normalises embeddings and class centres, adds the margin m to the
angle of the true class only, and scales the logits by s."""
import math

import numpy as np
import tensorflow as tf
import keras

SPEAKERS, FEATS = 40, 80


class ArcMarginHead(keras.layers.Layer):
    def __init__(self, n_classes, s=30.0, m=0.3, **kwargs):
        super().__init__(**kwargs)
        self.n_classes, self.s, self.m = n_classes, s, m

    def build(self, input_shape):
        self.centres = self.add_weight(shape=(input_shape[0][-1], self.n_classes), initializer="glorot_uniform",
                                       name="centres")

    def call(self, inputs):
        emb, labels = inputs
        cos = tf.matmul(tf.math.l2_normalize(emb, axis=1), tf.math.l2_normalize(self.centres, axis=0))
        sin = tf.sqrt(tf.clip_by_value(1.0 - tf.square(cos), 0.0, 1.0))
        phi = cos * math.cos(self.m) - sin * math.sin(self.m)
        # past pi - m the margin would make the angle wrap around: fall back to a linear penalty
        phi = tf.where(cos > math.cos(math.pi - self.m), phi, cos - math.sin(math.pi - self.m) * self.m)
        onehot = tf.one_hot(tf.reshape(labels, [-1]), self.n_classes)
        logits = onehot * phi + (1.0 - onehot) * cos
        return self.s * logits


def build_model():
    feats = keras.Input((FEATS,), name="utterance")
    labels = keras.Input((1,), dtype="int32", name="speaker")
    h = keras.layers.Dense(256, activation="relu")(feats)
    h = keras.layers.Dense(256, activation="relu")(h)
    emb = keras.layers.Dense(128, name="embedding")(h)
    logits = ArcMarginHead(SPEAKERS)([emb, labels])
    logits = keras.layers.Activation("linear", dtype="float32")(logits)
    return keras.Model([feats, labels], logits)


def make_utterances(n=6000, seed=1):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(SPEAKERS, FEATS))
    spk = rng.integers(0, SPEAKERS, n)
    x = centres[spk] + 1.5 * rng.normal(size=(n, FEATS))
    return x.astype("float32"), spk.astype("int32")[:, None]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, spk = make_utterances()
    model = build_model()
    model.compile(keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit([x, spk], spk, batch_size=128, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
