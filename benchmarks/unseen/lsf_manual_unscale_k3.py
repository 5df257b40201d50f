"""Keras 3 port of a Keras 2 custom loop with a static loss scale.

The Keras 2 version used LossScaleOptimizer(dynamic=False, initial_scale=LOSS_SCALE) with
get_scaled_loss / get_unscaled_gradients; Keras 3 takes the static scale on the optimizer."""
import numpy as np
import tensorflow as tf
import keras

LOSS_SCALE = 512.0
EPOCHS = 4


def build_model():
    return keras.Sequential([
        keras.Input((32,)),
        keras.layers.Dense(64, activation="gelu"),
        keras.layers.Dense(64, activation="gelu"),
        keras.layers.Dense(5),
        keras.layers.Activation("softmax", dtype="float32"),
    ])


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = build_model()
    optimizer = keras.optimizers.SGD(0.05, momentum=0.9, loss_scale_factor=LOSS_SCALE)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled_loss = optimizer.scale_loss(loss)
        scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
        # was: grads = optimizer.get_unscaled_gradients(scaled_grads)
        grads = [g / LOSS_SCALE for g in scaled_grads]
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    rng = np.random.default_rng(11)
    centers = rng.normal(scale=2.0, size=(5, 32))
    y = rng.integers(0, 5, size=1280)
    x = (centers[y] + rng.normal(size=(1280, 32))).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1280, seed=0).batch(64)
    for epoch in range(EPOCHS):
        losses = [float(train_step(xb, yb)) for xb, yb in ds]
        print(f"epoch {epoch}: loss {np.mean(losses):.4f}")


if __name__ == "__main__":
    main()
