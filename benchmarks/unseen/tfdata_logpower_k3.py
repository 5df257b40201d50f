"""Machine-state classifier from microphone clips (Keras 3). The tf.data pipeline frames each clip and turns it into log frame
energies in half precision, the dtype the mixed_float16 model computes in."""
import numpy as np
import tensorflow as tf
import keras

SAMPLES = 4000
HOP = 80
FRAMES = SAMPLES // HOP
WORDS = 4


def log_energy(clip, label):
    frames = tf.reshape(tf.cast(clip, tf.float16), (FRAMES, HOP))
    energy = tf.reduce_mean(tf.square(frames), axis=-1)
    return tf.math.log(energy + 1e-10)[:, None], label


def make_pipeline(n=1024, seed=5):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, WORDS, n)
    t = np.arange(SAMPLES) / 8000.0
    clips = np.sin(2 * np.pi * 300.0 * t) * (0.05 + 0.15 * labels[:, None]) * rng.uniform(0.8, 1.2, (n, 1))
    clips += 0.01 * rng.normal(size=clips.shape)
    lengths = rng.integers(SAMPLES // 2, SAMPLES, n)
    clips[np.arange(SAMPLES)[None, :] >= lengths[:, None]] = 0.0   # zero-padded to a fixed length
    ds = tf.data.Dataset.from_tensor_slices((clips.astype("float32"), labels))
    return ds.map(log_energy, num_parallel_calls=tf.data.AUTOTUNE).batch(32)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([
        keras.Input((FRAMES, 1)),
        keras.layers.Conv1D(32, 5, activation="relu"),
        keras.layers.GlobalMaxPooling1D(),
        keras.layers.Dense(WORDS),
        keras.layers.Activation("softmax", dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(2e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(make_pipeline(), epochs=3, verbose=2)


if __name__ == "__main__":
    main()
