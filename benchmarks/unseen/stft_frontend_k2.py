"""tf_keras keyword spotter that computes its features in the graph: a log-mel spectrogram layer
(25 ms frames, 10 ms hop, 40 mel bands) on the raw 16 kHz waveform, then a small 1-D conv net; the
front end is a layer so that the exported model takes audio directly."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
from tensorflow import keras

RATE, WORDS = 16000, 6


class LogMelSpectrogram(keras.layers.Layer):
    def __init__(self, frame_length=400, frame_step=160, fft_length=512, bands=40, **kwargs):
        super().__init__(**kwargs)
        self.frame_length, self.frame_step, self.fft_length = frame_length, frame_step, fft_length
        self.mel_matrix = tf.signal.linear_to_mel_weight_matrix(bands, fft_length // 2 + 1, RATE, 20.0, 7600.0)

    def call(self, waveform):
        spectrum = tf.signal.stft(waveform, self.frame_length, self.frame_step, self.fft_length)
        mel = tf.tensordot(tf.square(tf.abs(spectrum)), self.mel_matrix, 1)
        return tf.math.log(mel + 1e-6)


def build():
    audio = keras.Input((RATE,))
    h = LogMelSpectrogram()(audio)
    h = keras.layers.LayerNormalization(axis=[1, 2])(h)
    for width in (64, 96, 128):
        h = keras.layers.Conv1D(width, 5, padding="same", activation="relu")(h)
        h = keras.layers.MaxPooling1D(2)(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(audio, keras.layers.Dense(WORDS, activation="softmax", dtype="float32")(h))


def make_clips(n=1200, seed=9):
    """Each 'word' is a chirp between its own two formant frequencies, at a random onset and loudness."""
    rng = np.random.default_rng(seed)
    t = np.arange(RATE) / RATE
    words = rng.integers(0, WORDS, n)
    f0, f1 = rng.uniform(200, 3000, (2, WORDS))
    clips = 0.01 * rng.normal(size=(n, RATE))
    for i, w in enumerate(words):
        start = rng.integers(0, RATE // 2)
        seg = t[: RATE // 3]
        chirp = np.sin(2 * np.pi * (f0[w] * seg + (f1[w] - f0[w]) * seg ** 2 * 1.5)) * rng.uniform(0.2, 0.9)
        clips[i, start:start + seg.size] += chirp
    return clips.astype("float32"), words


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_clips()
    model = build()
    model.compile(keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=4, validation_split=0.2, verbose=2)


if __name__ == "__main__":
    main()
