"""Keras 3 (keras.ops only) sparse mixture-of-experts token classifier: a softmax router picks the top-2
of 4 feed-forward experts per token, and an importance loss (Shazeer et al. 2017) keeps the experts
evenly used: E * sum(importance**2) / sum(importance)**2, which is 1.0 when balanced."""
import numpy as np
import keras
from keras import layers, ops

NUM_EXPERTS = 4
TOP_K = 2


class MoEFeedForward(layers.Layer):
    def __init__(self, width, hidden, balance_weight=0.01, **kwargs):
        super().__init__(**kwargs)
        self.router = layers.Dense(NUM_EXPERTS, use_bias=False)
        self.experts_in = [layers.Dense(hidden, activation="gelu") for _ in range(NUM_EXPERTS)]
        self.experts_out = [layers.Dense(width) for _ in range(NUM_EXPERTS)]
        self.balance_weight = balance_weight

    def call(self, x):
        gates = ops.softmax(self.router(x), axis=-1)                  # (batch, tokens, experts)
        top_vals, top_idx = ops.top_k(gates, k=TOP_K)
        mask = ops.sum(ops.one_hot(top_idx, NUM_EXPERTS, dtype=gates.dtype), axis=-2)
        sparse = gates * mask
        sparse = sparse / ops.sum(sparse, axis=-1, keepdims=True)
        importance = ops.sum(sparse, axis=(0, 1))                      # tokens routed to each expert
        balance = NUM_EXPERTS * ops.sum(ops.square(importance)) / ops.square(ops.sum(importance))
        self.add_loss(ops.cast(self.balance_weight * balance, "float32"))
        outs = ops.stack([out(inp(x)) for inp, out in zip(self.experts_in, self.experts_out)], axis=-2)
        return ops.sum(outs * ops.expand_dims(sparse, -1), axis=-2)


def make_data(n=2048, seq=64, vocab=500, seed=12):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, size=(n, seq)).astype("int32")
    labels = ((tokens % 7) == 0).astype("float32")
    return tokens, labels


def build(vocab=500, seq=64, width=64):
    inp = keras.Input((seq,), dtype="int32")
    h = layers.Embedding(vocab, width)(inp)
    h = h + MoEFeedForward(width, 128)(layers.LayerNormalization()(h))
    out = layers.Dense(1, activation="sigmoid", dtype="float32")(h)
    return keras.Model(inp, out)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    tokens, labels = make_data()
    model = build()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
    model.fit(tokens, labels[..., None], batch_size=128, epochs=2, verbose=2)


if __name__ == "__main__":
    main()
