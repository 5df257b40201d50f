"""Knowledge distillation on tf_keras: a frozen teacher, a student, KL on softened outputs."""
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")
T = 4.0


def mlp(width, classes):
    return keras.Sequential([keras.layers.Dense(width, activation="relu", input_shape=(30,)), keras.layers.Dense(classes)])


teacher, student = mlp(256, 10), mlp(32, 10)
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))


@tf.function
def distill_step(x):
    p_teacher = tf.nn.softmax(teacher(x, training=False) / T)
    with tf.GradientTape() as tape:
        log_p_student = tf.nn.log_softmax(student(x, training=True) / T)
        kl = tf.reduce_sum(p_teacher * (tf.math.log(p_teacher) - log_p_student), axis=-1)
        loss = tf.cast(tf.reduce_mean(kl), tf.float32) * T**2
        scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, student.trainable_variables))
    optimizer.apply_gradients(zip(grads, student.trainable_variables))
    return loss


if __name__ == "__main__":
    data = np.random.default_rng(35).normal(size=(256, 30)).astype("float32")
    for i, batch in enumerate(tf.data.Dataset.from_tensor_slices(data).batch(64)):
        print(i, float(distill_step(batch)))
