"""1-D GAN on tf_keras with one LossScaleOptimizer per network."""
import numpy as np
import tensorflow as tf
import tf_keras as keras
from tf_keras import mixed_precision

mixed_precision.set_global_policy("mixed_float16")
NOISE = 16

generator = keras.Sequential(
    [keras.layers.Dense(64, activation="relu", input_shape=(NOISE,)), keras.layers.Dense(2, dtype="float32")]
)
discriminator = keras.Sequential(
    [keras.layers.Dense(64, activation="relu", input_shape=(2,)), keras.layers.Dense(1)]
)
g_opt = mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(2e-4, beta_1=0.5))
d_opt = mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(2e-4, beta_1=0.5))


def softplus(x):
    return tf.math.log1p(tf.exp(x))


def d_loss_fn(real_logits, fake_logits):
    return tf.reduce_mean(softplus(-real_logits)) + tf.reduce_mean(softplus(fake_logits))


@tf.function
def train_step(real):
    noise = tf.random.normal((tf.shape(real)[0], NOISE))
    with tf.GradientTape() as d_tape:
        fake = generator(noise, training=True)
        d_loss = d_loss_fn(discriminator(real, training=True), discriminator(fake, training=True))
        d_scaled = d_opt.get_scaled_loss(d_loss)
    d_grads = d_opt.get_unscaled_gradients(d_tape.gradient(d_scaled, discriminator.trainable_variables))
    d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))

    with tf.GradientTape() as g_tape:
        fake_logits = discriminator(generator(noise, training=True), training=True)
        g_loss = tf.reduce_mean(softplus(-fake_logits))
        g_scaled = g_opt.get_scaled_loss(g_loss)
    g_grads = g_tape.gradient(g_scaled, generator.trainable_variables)
    g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
    return d_loss, g_loss


if __name__ == "__main__":
    rng = np.random.default_rng(8)
    real = rng.normal(loc=(3.0, -1.0), scale=0.5, size=(512, 2)).astype("float32")
    for i, batch in enumerate(tf.data.Dataset.from_tensor_slices(real).batch(64).take(6)):
        d, g = train_step(batch)
        print(i, float(d), float(g))
