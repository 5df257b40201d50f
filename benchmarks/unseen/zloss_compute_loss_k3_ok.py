"""Keras 3 next-token classifier whose compute_loss adds a z-loss (PaLM-style) on the logits.

The logits head stays in the compute dtype; compute_loss moves them to float32 first."""
import numpy as np
import keras
from keras import ops

VOCAB = 256


class TinyLM(keras.Model):
    def __init__(self, z_weight=1e-4, **kwargs):
        super().__init__(**kwargs)
        self.z_weight = z_weight
        self.embed = keras.layers.Embedding(VOCAB, 64)
        self.rnn = keras.layers.GRU(96, return_sequences=False)
        self.head = keras.layers.Dense(VOCAB)
        self.xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def call(self, tokens):
        return self.head(self.rnn(self.embed(tokens)))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        logits = ops.cast(y_pred, "float32")
        log_z = ops.logsumexp(logits, axis=-1)
        return self.xent(y, logits) + self.z_weight * ops.mean(ops.square(log_z))


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(10)
    tokens = rng.integers(0, VOCAB, size=(2048, 24))
    tokens[:, 1::2] = (tokens[:, 0::2] * 5 + 1) % VOCAB
    x, y = tokens[:, :-1], tokens[:, -1]
    model = TinyLM()
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    model.fit(x, y, batch_size=64, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
