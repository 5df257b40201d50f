"""Keras 3 loop using optimizer.apply on a dict of weights; the policy comes from keras.config."""
import keras
import numpy as np
import tensorflow as tf


def run(steps=10):
    keras.config.set_dtype_policy("mixed_float16")
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1, dtype="float32")])
    optimizer = keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-4)
    x = np.random.default_rng(33).normal(size=(256, 20)).astype("float32")
    y = x[:, :1] * 2.0
    for step in range(steps):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.losses.mean_squared_error(y, model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply(grads, model.trainable_weights)
        print(step, float(loss))


if __name__ == "__main__":
    run()
