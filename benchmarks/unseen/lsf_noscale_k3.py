"""Keras 3 mixed precision with a fixed loss scale on the optimizer (loss_scale_factor) and a custom loop."""
import numpy as np
import tensorflow as tf
import keras

CONFIG = {"lr": 0.05, "momentum": 0.9, "loss_scale": 1024.0, "epochs": 4, "batch": 32}


def make_optimizer(cfg):
    # a static loss scale: cheaper than LossScaleOptimizer's dynamic one, no skipped steps
    return keras.optimizers.SGD(cfg["lr"], momentum=cfg["momentum"], loss_scale_factor=cfg["loss_scale"])


def make_model():
    return keras.Sequential([
        keras.Input((16, 16, 3)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(4),
        keras.layers.Activation("softmax", dtype="float32"),
    ])


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = make_model()
    optimizer = make_optimizer(CONFIG)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def step(images, labels):
        with tf.GradientTape() as tape:
            probs = model(images, training=True)
            loss = loss_fn(labels, probs)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    rng = np.random.default_rng(5)
    labels = rng.integers(0, 4, size=(512,))
    images = rng.normal(size=(512, 16, 16, 3)).astype("float32") * 0.5
    images[np.arange(512), labels * 4, labels * 4, :] += 4.0
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).batch(CONFIG["batch"])
    for epoch in range(CONFIG["epochs"]):
        losses = [float(step(x, y)) for x, y in ds]
        print(f"epoch {epoch} loss {np.mean(losses):.4f}")


if __name__ == "__main__":
    main()
