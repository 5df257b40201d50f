"""SimCLR-style NT-Xent with a low temperature; subclassed encoder, logsumexp written out by hand."""
import numpy as np
import tensorflow as tf

TEMPERATURE = 0.05


class Encoder(tf.keras.Model):
    def __init__(self, dim=64):
        super().__init__()
        self.backbone = tf.keras.Sequential(
            [tf.keras.layers.Conv2D(16, 3, activation="relu"), tf.keras.layers.GlobalAveragePooling2D()]
        )
        self.head = tf.keras.layers.Dense(dim)

    def call(self, x, training=False):
        z = self.head(self.backbone(x, training=training))
        return tf.math.l2_normalize(tf.cast(z, tf.float32), axis=1)


def nt_xent(z1, z2):
    z = tf.cast(tf.concat([z1, z2], 0), tf.float16)
    logits = tf.matmul(z, z, transpose_b=True) / TEMPERATURE
    n = tf.shape(z1)[0]
    positives = tf.concat([tf.range(n, 2 * n), tf.range(0, n)], 0)
    pos_logit = tf.gather(logits, positives, batch_dims=1)
    log_denominator = tf.math.log(tf.reduce_sum(tf.exp(logits), axis=1) - tf.exp(tf.linalg.diag_part(logits)))
    return tf.reduce_mean(tf.cast(log_denominator - pos_logit, tf.float32))


def augment(images):
    return tf.image.random_flip_left_right(images) + tf.random.normal(tf.shape(images), stddev=0.05)


if __name__ == "__main__":
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    encoder = Encoder()
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
    images = tf.constant(np.random.default_rng(4).uniform(size=(32, 24, 24, 3)), tf.float32)
    for step in range(3):
        with tf.GradientTape() as tape:
            loss = nt_xent(encoder(augment(images), training=True), encoder(augment(images), training=True))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, encoder.trainable_variables)
        optimizer.apply_gradients(zip(grads, encoder.trainable_variables))
        print("step", step, "loss", float(loss))
