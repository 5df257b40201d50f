"""Keras 3 backend-agnostic pointer network head with a hand-rolled softmax over candidates."""
import keras
import numpy as np
from keras import ops

keras.mixed_precision.set_global_policy("mixed_float16")


class PointerScores(keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.query = keras.layers.Dense(units)
        self.key = keras.layers.Dense(units)

    def call(self, decoder_state, candidates):
        q = ops.expand_dims(self.query(decoder_state), 1)
        scores = ops.sum(q * self.key(candidates), axis=-1)
        weights = ops.exp(scores) / ops.sum(ops.exp(scores), axis=-1, keepdims=True)
        return weights


def build(n_candidates=20, dim=32):
    state = keras.Input((dim,))
    cands = keras.Input((n_candidates, dim))
    probs = PointerScores(64)(state, cands)
    return keras.Model([state, cands], keras.layers.Activation("linear", dtype="float32")(probs))


if __name__ == "__main__":
    rng = np.random.default_rng(31)
    state = rng.normal(size=(128, 32)).astype("float32")
    cands = rng.normal(size=(128, 20, 32)).astype("float32")
    target = rng.integers(0, 20, size=128)
    model = build()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit([state, cands], target, batch_size=32, epochs=1, steps_per_epoch=3, verbose=2)
