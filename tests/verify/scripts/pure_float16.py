"""A pure ``"float16"`` policy (not mixed) and a -1e9 attention-style mask: -inf in float16,
NaN at step 0. The float32 baseline must really be float32 (finite), not float16 again."""
import argparse

import numpy as np
import tensorflow as tf

keras = tf.keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

keras.mixed_precision.set_global_policy("float16")


class MaskedPool(keras.layers.Layer):
    def call(self, inputs):
        x, mask = inputs
        scores = tf.reduce_sum(x, axis=-1) + (1.0 - tf.cast(mask, x.dtype)) * -1e9
        weights = tf.nn.softmax(scores, axis=-1)
        return tf.reduce_sum(x * weights[..., None], axis=1)


tokens, mask = keras.Input((6, 4)), keras.Input((6,))
out = keras.layers.Dense(1)(MaskedPool()([keras.layers.Dense(4)(tokens), mask]))
model = keras.Model([tokens, mask], out)
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
rng = np.random.default_rng(9)
x = rng.normal(size=(128, 6, 4)).astype("float32")
m = (np.arange(6)[None, :] < rng.integers(2, 6, size=(128, 1))).astype("float32")
y = rng.normal(size=(128, 1)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices(((x, m), y)).batch(32).repeat()
model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0)
