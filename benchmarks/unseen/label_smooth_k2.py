"""tf_keras image classifier with label smoothing written by hand in a custom training loop."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")
NUM_CLASSES, SMOOTHING = 10, 0.1

model = keras.Sequential(
    [
        keras.layers.Conv2D(32, 3, activation="relu", input_shape=(32, 32, 3)),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(NUM_CLASSES),
    ]
)
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))


def smoothed_targets(labels):
    one_hot = tf.one_hot(labels, NUM_CLASSES)
    return one_hot * (1.0 - SMOOTHING) + SMOOTHING / NUM_CLASSES


@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        log_probs = tf.nn.log_softmax(logits)
        loss = -tf.reduce_mean(tf.reduce_sum(smoothed_targets(labels) * log_probs, axis=-1))
        scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(21)
    images = rng.uniform(size=(256, 32, 32, 3)).astype("float32")
    labels = rng.integers(0, NUM_CLASSES, size=(256,))
    for step, (xb, yb) in enumerate(tf.data.Dataset.from_tensor_slices((images, labels)).batch(64)):
        print(step, float(train_step(xb, yb)))
