"""Training loop meant to run on Keras 2 (tf_keras) and Keras 3: loss scaling behind hasattr checks."""
import numpy as np
import tensorflow as tf

try:
    import tf_keras as keras  # noqa: F401  (Keras 2 when TF_USE_LEGACY_KERAS is set)
    import os
    if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise ImportError
except ImportError:
    import keras


def scale_loss(optimizer, loss):
    if hasattr(optimizer, "get_scaled_loss"):
        return optimizer.get_scaled_loss(loss)
    return loss


def unscale_gradients(optimizer, grads):
    if hasattr(optimizer, "get_unscaled_gradients"):
        return optimizer.get_unscaled_gradients(grads)
    return grads


def build():
    keras.mixed_precision.set_global_policy("mixed_float16")
    inputs = keras.Input((32,))
    h = keras.layers.Dense(128, activation="gelu")(inputs)
    h = keras.layers.Dense(128, activation="gelu")(h)
    outputs = keras.layers.Dense(4, dtype="float32")(h)
    model = keras.Model(inputs, outputs)
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    return model, optimizer


def main():
    model, optimizer = build()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = scale_loss(optimizer, loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        grads = unscale_gradients(optimizer, grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    rng = np.random.default_rng(5)
    x = rng.normal(size=(1024, 32)).astype("float32")
    y = np.argmax(x[:, :4], axis=1).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    for epoch in range(4):
        losses = [float(train_step(bx, by)) for bx, by in ds]
        print(f"epoch {epoch} loss {np.mean(losses):.4f}")


if __name__ == "__main__":
    main()
