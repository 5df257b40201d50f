# What goes wrong: an attention mask written as `scores + (1 - mask) * -1e9` under
# mixed_float16. The loss is NaN from the very first step.
# Why: float16's largest value is 65504, so -1e9 becomes -inf. At positions the mask keeps,
# (1 - mask) is 0 and 0 * -inf is NaN, so every softmax row is NaN. Keras' own float16 mask
# constant is -3e4 (large enough to zero a softmax weight, small enough to stay finite).
# mpfix: MP201 (unsafe fix: a float16-safe mask constant).
import argparse

import numpy as np
import tensorflow as tf
from tensorflow import keras

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
args = parser.parse_args()

keras.utils.set_random_seed(0)
keras.mixed_precision.set_global_policy("mixed_float16")


class MaskedAttentionPooling(keras.layers.Layer):
    """Pools a sequence into one vector, attending only to the positions the mask keeps."""

    def build(self, input_shape):
        self.query = self.add_weight(shape=(input_shape[-1],), initializer="glorot_uniform", name="query")

    def call(self, hidden, mask):
        scores = tf.reduce_sum(hidden * self.query, axis=-1)
        mask = tf.cast(mask, scores.dtype)
        scores = scores + (1.0 - mask) * -1e9
        weights = tf.nn.softmax(scores, axis=-1)
        return tf.reduce_sum(weights[..., None] * hidden, axis=1)


rng = np.random.default_rng(0)
tokens = rng.normal(size=(512, 12, 16)).astype("float32")
lengths = rng.integers(3, 13, size=512)
mask = (np.arange(12)[None, :] < lengths[:, None]).astype("float32")
labels = (tokens[:, 0, 0] > 0).astype("float32")

inputs = keras.Input((12, 16))
mask_input = keras.Input((12,))
hidden = keras.layers.Dense(32, activation="relu")(inputs)
pooled = MaskedAttentionPooling()(hidden, mask_input)
outputs = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(pooled)
model = keras.Model([inputs, mask_input], outputs)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.BinaryCrossentropy())
history = model.fit([tokens, mask], labels, batch_size=64, epochs=args.epochs, verbose=0)
for epoch, loss in enumerate(history.history["loss"]):
    print(f"epoch {epoch}  loss {loss:.4f}")
