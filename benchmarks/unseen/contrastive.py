"""SimCLR-style contrastive pretraining (InfoNCE), Keras 3 optimizer API in a custom loop."""
import numpy as np
import tensorflow as tf

TEMPERATURE = 0.1


def augment(images):
    noise = tf.random.normal(tf.shape(images), stddev=0.1)
    return tf.clip_by_value(images + noise, 0.0, 1.0)


class Projector(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.backbone = tf.keras.Sequential(
            [tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(256, activation="relu")]
        )
        self.proj = tf.keras.layers.Dense(64)

    def call(self, x, training=False):
        z = self.proj(self.backbone(x, training=training))
        return z / (tf.norm(z, axis=1, keepdims=True) + 1e-8)


def info_nce(z1, z2):
    z = tf.concat([z1, z2], axis=0)
    n = tf.shape(z1)[0]
    sim = tf.matmul(z, z, transpose_b=True) / TEMPERATURE
    sim = sim - 1e9 * tf.eye(2 * n, dtype=sim.dtype)
    targets = tf.concat([tf.range(n, 2 * n), tf.range(0, n)], axis=0)
    log_prob = sim - tf.reduce_logsumexp(sim, axis=1, keepdims=True)
    picked = tf.gather(log_prob, targets, axis=1, batch_dims=1)
    return -tf.reduce_mean(tf.cast(picked, tf.float32))


def main(steps=10):
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = Projector()
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(3e-4))
    data = np.random.default_rng(6).uniform(size=(512, 32)).astype("float32")

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = info_nce(model(augment(x), training=True), model(augment(x), training=True))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for i, batch in enumerate(tf.data.Dataset.from_tensor_slices(data).batch(64).take(steps)):
        print(i, float(step(batch)))


if __name__ == "__main__":
    main()
