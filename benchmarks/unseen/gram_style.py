"""Texture matching with Gram matrices of conv features (tf_keras), optimizer.minimize with a tape."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


def gram(features):
    b, h, w, c = features.shape
    return tf.einsum("bijc,bijd->bcd", features, features) / float(h * w)


features = keras.Sequential(
    [
        keras.layers.Conv2D(32, 3, padding="same", activation="relu", input_shape=(64, 64, 3)),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
    ]
)
generator = keras.Sequential([keras.layers.Dense(64 * 64 * 3, input_shape=(16,)), keras.layers.Reshape((64, 64, 3))])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))


def train_step(z, target_gram):
    with tf.GradientTape() as tape:
        image = 255.0 * tf.sigmoid(tf.cast(generator(z, training=True), tf.float32))
        loss = tf.reduce_mean(tf.square(tf.cast(gram(features(image)), tf.float32) - target_gram))
    optimizer.minimize(loss, generator.trainable_variables, tape=tape)
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(24)
    texture = (255.0 * rng.uniform(size=(1, 64, 64, 3))).astype("float32")
    target = tf.cast(gram(features(texture)), tf.float32)
    z = rng.normal(size=(2, 16)).astype("float32")
    for i in range(4):
        print(i, float(train_step(z, target)))
