"""Tabular regression with a custom loop; the train step is a closure inside main()."""
import argparse

import numpy as np
import tensorflow as tf


def build_model(width):
    inputs = tf.keras.Input(shape=(16,))
    h = tf.keras.layers.Dense(width, activation="gelu")(inputs)
    h = tf.keras.layers.Dense(width, activation="gelu")(h)
    outputs = tf.keras.layers.Dense(1, dtype="float32")(h)
    return tf.keras.Model(inputs, outputs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(1)
    features = rng.normal(size=(512, 16)).astype("float32")
    targets = (features @ rng.normal(size=(16, 1))).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((features, targets)).shuffle(512).batch(64).repeat()

    model = build_model(args.width)
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.01, momentum=0.9))
    loss_fn = tf.keras.losses.MeanSquaredError()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            loss = loss_fn(y, pred)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step, (x, y) in enumerate(dataset.take(args.steps)):
        loss = train_step(x, y)
        if step % 5 == 0:
            print(f"step {step} loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
