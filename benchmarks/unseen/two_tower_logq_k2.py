"""tf_keras two-tower retrieval for a music catalogue: user and track towers, in-batch sampled softmax
with the logQ correction of Yi et al. 2019 (subtract the log of each candidate's sampling probability,
estimated from all-time play counts); a Model subclass with its own train_step."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
from tensorflow import keras

USERS, TRACKS, GENRES = 2000, 5000, 20


def tower(vocab, dim=64):
    return keras.Sequential([
        keras.layers.Embedding(vocab, 64),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(dim),
    ])


class TwoTower(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.user_tower = tower(USERS)
        self.track_tower = tower(TRACKS)

    def call(self, inputs):
        users, tracks = inputs
        return tf.matmul(self.user_tower(users), self.track_tower(tracks), transpose_b=True)

    def train_step(self, data):
        users, tracks, track_prob = data
        with tf.GradientTape() as tape:
            logits = self((users, tracks), training=True)
            logits -= tf.math.log(tf.cast(track_prob, logits.dtype))[None, :]
            labels = tf.range(tf.shape(logits)[0])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32)))
            scaled = self.optimizer.get_scaled_loss(loss)
        grads = self.optimizer.get_unscaled_gradients(tape.gradient(scaled, self.trainable_variables))
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def make_log(n=60000, seed=8):
    rng = np.random.default_rng(seed)
    rank = np.arange(1, TRACKS + 1)
    plays = np.floor(2e8 / rank ** 1.6) + 1
    plays[-500:] = rng.integers(1, 40, 500)  # this month's releases
    prob = (plays / plays.sum()).astype("float32")
    genre_of_track = rng.integers(0, GENRES, TRACKS)
    genre_of_user = rng.integers(0, GENRES, USERS)
    users = rng.integers(0, USERS, n)
    by_genre = [np.flatnonzero(genre_of_track == g) for g in range(GENRES)]
    tracks = np.array([rng.choice(by_genre[genre_of_user[u]]) for u in users])
    return users.astype("int32"), tracks.astype("int32"), prob[tracks]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    users, tracks, track_prob = make_log()
    model = TwoTower()
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    data = tf.data.Dataset.from_tensor_slices((users, tracks, track_prob)).shuffle(60000).batch(512, drop_remainder=True)
    model.fit(data, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
