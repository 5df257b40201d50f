"""tf_keras session-based next-item model (GRU4Rec style) for an online shop: a GRU over the clicked
item ids, scored against the batch's target items plus popularity-sampled negatives; sampled softmax
with the logQ correction, log(q) taken in float32 on probabilities clipped to [1e-6, 1] (as TFRS does);
a Model subclass with its own train_step."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
from tensorflow import keras

ITEMS, STEPS, NEGATIVES = 8000, 12, 256


class SessionModel(keras.Model):
    def __init__(self, popularity, **kwargs):
        super().__init__(**kwargs)
        self.popularity = tf.constant(popularity)  # float32 sampling distribution of the negatives
        self.item_embedding = keras.layers.Embedding(ITEMS, 64)
        self.gru = keras.layers.GRU(128)
        self.project = keras.layers.Dense(64)

    def call(self, sessions):
        return self.project(self.gru(self.item_embedding(sessions)))

    def train_step(self, data):
        sessions, targets = data
        negatives = tf.random.categorical(tf.math.log(self.popularity)[None, :], NEGATIVES)[0]
        candidates = tf.concat([targets, tf.cast(negatives, targets.dtype)], axis=0)
        log_q = tf.math.log(tf.clip_by_value(tf.gather(self.popularity, candidates), 1e-6, 1.0))
        with tf.GradientTape() as tape:
            state = self(sessions, training=True)
            logits = tf.matmul(state, self.item_embedding(candidates), transpose_b=True)
            logits = logits - tf.cast(log_q, logits.dtype)[None, :]
            labels = tf.range(tf.shape(targets)[0])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32)))
            scaled = self.optimizer.get_scaled_loss(loss)
        grads = self.optimizer.get_unscaled_gradients(tape.gradient(scaled, self.trainable_variables))
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def make_sessions(n=30000, seed=13):
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, ITEMS + 1) ** 1.3
    popularity /= popularity.sum()
    category = np.arange(ITEMS) % 40
    start = rng.choice(ITEMS, n, p=popularity)
    walks = [start]
    for _ in range(STEPS):  # the next click stays in the category of the last one
        walks.append((category[walks[-1]] + 40 * rng.integers(0, ITEMS // 40, n)) % ITEMS)
    walks = np.stack(walks, 1).astype("int32")
    return walks[:, :-1], walks[:, -1], popularity.astype("float32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    sessions, targets, popularity = make_sessions()
    model = SessionModel(popularity)
    model.compile(optimizer=keras.optimizers.Adam(2e-3))
    data = tf.data.Dataset.from_tensor_slices((sessions, targets)).shuffle(30000).batch(256, drop_remainder=True)
    model.fit(data, epochs=3, verbose=2)


if __name__ == "__main__":
    main()
