"""Keras 3 keyword spotter: log-mel features computed by a layer inside the model."""
import numpy as np
import keras
import tensorflow as tf
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")
SAMPLE_RATE, N_MELS = 16000, 40


class LogMel(layers.Layer):
    def __init__(self, frame_length=512, frame_step=160, **kwargs):
        super().__init__(**kwargs)
        self.frame_length, self.frame_step = frame_length, frame_step
        self.mel = tf.signal.linear_to_mel_weight_matrix(N_MELS, frame_length // 2 + 1, SAMPLE_RATE, 20.0, 7600.0)

    def call(self, waveform):
        stft = tf.signal.stft(tf.cast(waveform, tf.float32), self.frame_length, self.frame_step)
        power = tf.cast(tf.abs(stft) ** 2, self.compute_dtype)
        mel = tf.matmul(power, tf.cast(self.mel, self.compute_dtype))
        return tf.math.log(mel + 1e-10)


def build(n_words=12):
    wave = keras.Input((SAMPLE_RATE,))
    h = LogMel()(wave)
    h = layers.Normalization(axis=-1)(h)
    h = layers.Conv1D(64, 5, activation="relu")(h)
    h = layers.Conv1D(64, 5, activation="relu")(h)
    h = layers.GlobalMaxPooling1D()(h)
    out = layers.Dense(n_words, activation="softmax", dtype="float32")(h)
    return keras.Model(wave, out)


if __name__ == "__main__":
    rng = np.random.default_rng(4)
    audio = (0.3 * rng.normal(size=(64, SAMPLE_RATE))).astype("float32")
    audio[::8, : SAMPLE_RATE // 2] = 0.0  # leading silence in some clips
    labels = rng.integers(0, 12, size=(64,))
    model = build()
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(audio, labels, batch_size=16, epochs=1, verbose=2)
