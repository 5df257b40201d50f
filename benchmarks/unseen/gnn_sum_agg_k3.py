"""Keras 3 GraphSAGE-style node classifier on a citation graph with a few hub papers (preferential
attachment); node features are the bag-of-words counts of each abstract: each layer sends a message per edge, sums the messages per destination node with
ops.segment_sum and divides by the in-degree (mean aggregation), full-batch fit."""
import numpy as np
import keras
from keras import ops


class MeanAggregate(keras.layers.Layer):
    """h' = relu(W_self h + W_neigh mean_{j -> i} h_j)."""

    def __init__(self, units, src, dst, num_nodes, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.src, self.dst, self.num_nodes = src, dst, num_nodes
        self.in_degree = np.maximum(np.bincount(dst, minlength=num_nodes), 1).astype("float32")[:, None]
        self.self_proj = keras.layers.Dense(units)
        self.neigh_proj = keras.layers.Dense(units, use_bias=False)

    def call(self, h):
        messages = self.neigh_proj(ops.take(h, self.src, axis=0))
        summed = ops.segment_sum(messages, self.dst, num_segments=self.num_nodes)
        neigh = summed / ops.cast(self.in_degree, summed.dtype)
        return ops.relu(self.self_proj(h) + neigh)


def make_graph(n=8000, m=4, classes=5, vocab=300, seed=11):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    rates = rng.gamma(1.0, 3.0, size=(classes, vocab))
    feats = rng.poisson(rates[labels]).astype("float32")  # bag-of-words counts of each abstract
    src, dst, targets = [], [], [0]
    for v in range(1, n):
        # cite m earlier papers, preferring papers that are already cited a lot
        for u in rng.choice(targets, size=min(m, len(targets))):
            src += [v, int(u)]
            dst += [int(u), v]
            targets.append(int(u))
        targets.append(v)
    return feats, labels, np.array(src, "int32"), np.array(dst, "int32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    feats, labels, src, dst = make_graph()
    n = len(labels)
    train = (np.arange(n) % 5 != 0).astype("float32")
    model = keras.Sequential([
        keras.Input((feats.shape[1],)),
        MeanAggregate(128, src, dst, n),
        MeanAggregate(128, src, dst, n),
        keras.layers.Dense(5, dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=["accuracy"])
    model.fit(feats, labels, sample_weight=train, batch_size=n, epochs=30, shuffle=False, verbose=2)
    print("max in-degree", int(np.bincount(dst).max()))


if __name__ == "__main__":
    main()
