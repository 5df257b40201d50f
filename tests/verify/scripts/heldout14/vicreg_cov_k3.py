"""VICReg-style self-supervised loss (Keras 3): the covariance term of unnormalised embeddings.

The projector's float16 embeddings are ~40; the covariance is written as a matmul of the centred
batch with itself divided by n - 1, and the float16 matmul sums 256 products of ~1600 before the
division: inf past 65504. Custom loop with Keras 3's LossScaleOptimizer.
"""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")

rng = np.random.default_rng(5)
images = (rng.normal(size=(1024, 32)) * 4.0).astype("float32")

encoder = keras.Sequential([
    keras.Input((32,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(32, kernel_initializer=keras.initializers.RandomNormal(stddev=1.5)),
])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1e-4))


def covariance_penalty(z):
    n = tf.cast(tf.shape(z)[0], z.dtype)
    centred = z - tf.reduce_mean(z, axis=0, keepdims=True)
    cov = tf.matmul(centred, centred, transpose_a=True) / (n - 1.0)
    off_diagonal = cov - tf.linalg.diag(tf.linalg.diag_part(cov))
    return tf.cast(tf.reduce_mean(tf.abs(off_diagonal)), tf.float32)


def invariance(z1, z2):
    return tf.reduce_mean(tf.abs(tf.cast(z1, tf.float32) - tf.cast(z2, tf.float32)))


@tf.function
def train_step(x):
    view1 = x + tf.random.normal(tf.shape(x), stddev=0.1)
    view2 = x + tf.random.normal(tf.shape(x), stddev=0.1)
    with tf.GradientTape() as tape:
        z1, z2 = encoder(view1, training=True), encoder(view2, training=True)
        loss = invariance(z1, z2) + 0.04 * (covariance_penalty(z1) + covariance_penalty(z2))
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, encoder.trainable_variables)
    optimizer.apply_gradients(zip(grads, encoder.trainable_variables))
    return loss


for epoch in range(10):
    for start in range(0, 1024, 256):
        loss = train_step(tf.constant(images[start:start + 256]))
print("loss", float(loss))
