"""Keyword spotting (Keras 3 fit): frame energies computed in a tf.data map on float16 audio.

The map casts 16-bit PCM samples (up to ~20000) to float16 to halve the pipeline's memory, frames
them and sums |x| over each 256-sample frame: ~10^6, inf in float16; log(energy) is inf and the
first Dense gives NaN. Nothing in the code says the samples are in PCM units.
"""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(11)
pcm = (rng.normal(size=(256, 4096)) * 8000.0).clip(-32768, 32767).astype("int16")
labels = rng.integers(0, 4, size=(256,)).astype("int32")


def to_features(samples, label):
    audio = tf.cast(samples, tf.float16)
    frames = tf.signal.frame(audio, frame_length=256, frame_step=256)
    energy = tf.reduce_sum(tf.abs(frames), axis=-1)
    return tf.math.log(energy + 1.0), label


dataset = tf.data.Dataset.from_tensor_slices((pcm, labels)).map(to_features).batch(32)

model = keras.Sequential([
    keras.Input((16,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(4, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(dataset, epochs=3, verbose=0)
