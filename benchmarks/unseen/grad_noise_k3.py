"""Keras 3 MLP with annealed Gaussian gradient noise (Neelakantan et al.), custom loop."""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential(
    [keras.Input((32,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1, dtype="float32")]
)
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1e-2))
mse = keras.losses.MeanSquaredError()
step_var = tf.Variable(0.0, trainable=False)


@tf.function
def train_step(x, y, eta=0.3, gamma=0.55):
    with tf.GradientTape() as tape:
        loss = mse(y, model(x, training=True))
        scaled_loss = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    stddev = tf.sqrt(eta / (1.0 + step_var) ** gamma)
    grads = [g + tf.random.normal(tf.shape(g), stddev=stddev) for g in grads]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    step_var.assign_add(1.0)
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(13)
    x = rng.normal(size=(512, 32)).astype("float32")
    y = np.sin(x[:, :1] * 2.0).astype("float32")
    for step in range(10):
        sl = slice(32 * (step % 16), 32 * (step % 16) + 32)
        print(f"step {step} loss {float(train_step(x[sl], y[sl])):.4f}")
