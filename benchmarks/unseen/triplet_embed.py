"""Face-embedding style triplet training, Keras 3 Model with its own train_step."""
import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
MARGIN = 0.5


class Embedder(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.net = tf.keras.Sequential([tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(512)])

    def call(self, x):
        return self.net(x)

    def train_step(self, data):
        anchor, positive, negative = data
        with tf.GradientTape() as tape:
            a, p, n = self(anchor), self(positive), self(negative)
            d_ap = tf.reduce_sum(tf.square(a - p), axis=-1)
            d_an = tf.reduce_sum(tf.square(a - n), axis=-1)
            loss = tf.reduce_mean(tf.cast(tf.maximum(d_ap - d_an + MARGIN, 0.0), tf.float32))
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


if __name__ == "__main__":
    rng = np.random.default_rng(34)
    triplets = tuple(rng.normal(size=(96, 128)).astype("float32") for _ in range(3))
    model = Embedder()
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-4))
    model.fit(tf.data.Dataset.from_tensor_slices(triplets).batch(32), epochs=1, verbose=2)
