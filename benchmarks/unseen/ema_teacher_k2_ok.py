"""Keras 2 (tf_keras) mean-teacher semi-supervised classifier: EMA teacher, consistency loss."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


def build():
    inputs = keras.Input((28, 28, 1))
    h = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    h = keras.layers.Conv2D(64, 3, strides=2, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(10, dtype="float32")(h))


student, teacher = build(), build()
teacher.set_weights(student.get_weights())
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x_lab, y_lab, x_unl, ema=0.99, weight=1.0):
    noisy = x_unl + tf.random.normal(tf.shape(x_unl), stddev=0.1)
    target = tf.nn.softmax(teacher(noisy, training=False))
    with tf.GradientTape() as tape:
        sup = xent(y_lab, student(x_lab, training=True))
        log_p = tf.nn.log_softmax(student(x_unl, training=True))
        consistency = -tf.reduce_mean(tf.reduce_sum(target * log_p, axis=-1))
        loss = sup + weight * consistency
        scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, student.trainable_variables))
    grads, _ = tf.clip_by_global_norm(grads, 5.0)
    optimizer.apply_gradients(zip(grads, student.trainable_variables))
    for t, s in zip(teacher.weights, student.weights):
        t.assign(ema * t + (1.0 - ema) * s)
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(17)
    x = rng.uniform(size=(256, 28, 28, 1)).astype("float32")
    y = rng.integers(0, 10, size=(256,))
    for step in range(6):
        lab, unl = slice(16 * step, 16 * step + 16), slice(128 + 16 * step, 144 + 16 * step)
        print(f"step {step} loss {float(train_step(x[lab], y[lab], x[unl])):.4f}")
