"""Keras 3 small CNN for 16x16 wafer-defect maps trained with a custom loop; the code mixes `tf.keras`
(policy, loss-scale optimizer) and `keras` (layers, loss) spellings, which under Keras 3 name the same
library: the loss is scaled with scale_loss and the step applied with apply (which unscales)."""
import numpy as np
import tensorflow as tf
import keras


def make_data(n=8192, classes=6, seed=17):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    grid = np.stack(np.meshgrid(np.arange(16), np.arange(16), indexing="ij"), -1).astype("float32")
    centers = rng.uniform(3, 13, size=(classes, 2)).astype("float32")
    d2 = ((grid[None] - centers[y][:, None, None, :]) ** 2).sum(-1)
    x = np.exp(-d2 / 8.0) + 0.2 * rng.normal(size=(n, 16, 16))
    return x[..., None].astype("float32"), y.astype("int32")


def build(classes=6):
    return keras.Sequential([
        keras.Input((16, 16, 1)),
        keras.layers.Conv2D(32, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu", padding="same"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(classes),
        keras.layers.Activation("linear", dtype="float32"),
    ])


def main():
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = make_data()
    model = build()
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    accuracy = keras.metrics.SparseCategoricalAccuracy()

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = loss_fn(yb, logits)
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        accuracy.update_state(yb, logits)
        return loss

    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(8192).batch(128)
    for epoch in range(3):
        accuracy.reset_state()
        losses = [float(train_step(xb, yb)) for xb, yb in data]
        print(f"epoch {epoch}: loss {np.mean(losses):.4f} accuracy {float(accuracy.result()):.3f}")


if __name__ == "__main__":
    main()
