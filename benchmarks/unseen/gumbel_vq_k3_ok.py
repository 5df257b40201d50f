"""Keras 3 discrete VAE with a Gumbel-softmax bottleneck (Jang et al. 2017) on binarized 8x8 strokes: 16
categorical latents of 32 classes, temperature annealed per epoch, KL to the uniform prior."""
import math

import numpy as np
import keras
from keras import layers, ops

LATENTS, CLASSES = 16, 32


class GumbelSoftmax(layers.Layer):
    def __init__(self, temperature=1.0, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature
        self.seed = keras.random.SeedGenerator(7)

    def call(self, logits):
        u = keras.random.uniform(ops.shape(logits), seed=self.seed)
        gumbel = -ops.log(-ops.log(u + 1e-20) + 1e-20)
        log_q = ops.log_softmax(logits, axis=-1)
        kl = ops.sum(ops.exp(log_q) * (log_q + math.log(CLASSES)), axis=(-2, -1))
        self.add_loss(ops.cast(ops.mean(kl), "float32") / 64.0)
        return ops.softmax((logits + ops.cast(gumbel, logits.dtype)) / self.temperature, axis=-1)


class Anneal(keras.callbacks.Callback):
    def __init__(self, bottleneck):
        super().__init__()
        self.bottleneck = bottleneck

    def on_epoch_begin(self, epoch, logs=None):
        self.bottleneck.temperature = max(0.5, 1.0 * math.exp(-0.3 * epoch))


def make_data(n=8192, seed=4):
    rng = np.random.default_rng(seed)
    protos = (rng.uniform(size=(24, 64)) > 0.5).astype("float32")
    flips = rng.uniform(size=(n, 64)) < 0.05
    return np.abs(protos[rng.integers(0, 24, n)] - flips).astype("float32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x = make_data()
    bottleneck = GumbelSoftmax()
    inp = keras.Input((64,))
    h = layers.Dense(256, activation="relu")(inp)
    logits = layers.Reshape((LATENTS, CLASSES))(layers.Dense(LATENTS * CLASSES)(h))
    z = layers.Flatten()(bottleneck(logits))
    h = layers.Dense(256, activation="relu")(z)
    recon = layers.Dense(64, activation="sigmoid", dtype="float32")(h)
    model = keras.Model(inp, recon)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
    model.fit(x, x, batch_size=128, epochs=3, verbose=2, callbacks=[Anneal(bottleneck)])


if __name__ == "__main__":
    main()
