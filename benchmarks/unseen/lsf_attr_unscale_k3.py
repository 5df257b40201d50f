"""Keras 3 custom loop with a fixed loss scale on the optimizer. Gradients are unscaled by the
optimizer's own factor before clipping, so the clip threshold is in real units."""
import numpy as np
import tensorflow as tf
import keras

EPOCHS = 4


def make_data(n=2048, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 24)).astype("float32")
    w = rng.normal(size=(24, 4))
    y = np.argmax(x @ w + 0.1 * rng.normal(size=(n, 4)), axis=1)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(n, seed=seed).batch(64)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([
        keras.Input((24,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(4),
        keras.layers.Activation("softmax", dtype="float32"),
    ])
    optimizer = keras.optimizers.SGD(learning_rate=0.05, momentum=0.9, loss_scale_factor=256.0)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            probs = model(x, training=True)
            loss = loss_fn(y, probs)
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = [g / optimizer.loss_scale_factor for g in grads]
        grads, _ = tf.clip_by_global_norm(grads, 5.0)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    data = make_data()
    for epoch in range(EPOCHS):
        losses = [float(train_step(x, y)) for x, y in data]
        print(f"epoch {epoch} loss {np.mean(losses):.4f}")


if __name__ == "__main__":
    main()
