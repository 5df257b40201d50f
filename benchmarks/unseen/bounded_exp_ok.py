"""Keras 3 normalizing-flow style affine coupling with a clipped log-scale (correct)."""
import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")


class AffineCoupling(keras.layers.Layer):
    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self.half = dim // 2
        self.net = keras.Sequential(
            [keras.layers.Dense(64, activation="relu"), keras.layers.BatchNormalization(epsilon=1e-5), keras.layers.Dense(2 * (dim - dim // 2))]
        )
        self.norm = keras.layers.LayerNormalization(epsilon=1e-6)

    def call(self, x):
        x1, x2 = x[:, : self.half], x[:, self.half :]
        log_s, t = tf.split(self.net(self.norm(x1)), 2, axis=-1)
        log_s = tf.clip_by_value(log_s, -5.0, 5.0)
        y2 = x2 * tf.exp(log_s) + t
        self.add_loss(-tf.reduce_mean(tf.reduce_sum(tf.cast(log_s, "float32"), axis=-1)))
        return tf.concat([x1, y2], axis=-1)


def main(steps=5):
    layer = AffineCoupling(8)
    head = keras.layers.Dense(1, dtype="float32")
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
    data = np.random.default_rng(26).normal(size=(128, 8)).astype("float32")
    for i in range(steps):
        with tf.GradientTape() as tape:
            z = layer(data, training=True)
            loss = tf.reduce_mean(tf.square(head(z))) + tf.add_n(layer.losses)
            scaled = optimizer.scale_loss(loss)
        variables = layer.trainable_variables + head.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(scaled, variables), variables))
        print(i, float(loss))


if __name__ == "__main__":
    main()
