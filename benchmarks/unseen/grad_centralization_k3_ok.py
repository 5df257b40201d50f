"""Keras 3 custom tf.function loop with Gradient Centralization (Yong et al. 2020): each kernel's
gradient has its mean over the fan-in axes removed before the update. The loss is scaled, the
gradients are centralised while scaled (a linear map, so the loss scale passes through), and the
LossScaleOptimizer's apply_gradients unscales; SGD's own global_clipnorm clips after unscaling."""
import numpy as np
import tensorflow as tf
import keras


def centralize(grads):
    out = []
    for g in grads:
        if g is not None and len(g.shape) > 1:
            g = g - tf.reduce_mean(g, axis=list(range(len(g.shape) - 1)), keepdims=True)
        out.append(g)
    return out


def build(n_classes=10):
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Flatten(),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(n_classes, dtype="float32"),
    ])


def make_digits(n=2048, seed=12):
    """Ten classes of noisy oriented bars."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    yy, xx = np.mgrid[:28, :28] - 13.5
    x = np.empty((n, 28, 28, 1), "float32")
    for i in range(n):
        angle = y[i] * np.pi / 10
        d = np.abs(np.cos(angle) * yy - np.sin(angle) * xx)
        x[i, ..., 0] = (d < 2.5) + 0.3 * rng.normal(size=(28, 28))
    return x, y.astype("int32")


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_digits()
    model = build()
    optimizer = keras.mixed_precision.LossScaleOptimizer(
        keras.optimizers.SGD(0.05, momentum=0.9, global_clipnorm=1.0))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
            scaled = optimizer.scale_loss(loss)
        grads = centralize(tape.gradient(scaled, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).batch(64)
    for epoch in range(3):
        losses = [float(step(xb, yb)) for xb, yb in data]
        print(f"epoch {epoch}: loss {np.mean(losses):.4f}")


if __name__ == "__main__":
    main()
