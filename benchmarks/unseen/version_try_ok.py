"""Regression script meant to run on Keras 2 and Keras 3: API differences handled by try/except."""
import numpy as np
import tensorflow as tf

try:
    from tensorflow.keras import mixed_precision
    mixed_precision.set_global_policy("mixed_float16")
except AttributeError:  # TF 2.1-2.3
    from tensorflow.keras.mixed_precision import experimental as mixed_precision
    mixed_precision.set_policy("mixed_float16")

inputs = tf.keras.Input((10,))
h = tf.keras.layers.Dense(64, activation="relu")(inputs)
model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, dtype="float32")(h))
optimizer = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(1e-2))
loss_fn = tf.keras.losses.MeanSquaredError()
KERAS3 = hasattr(optimizer, "scale_loss")


@tf.function(jit_compile=True)
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        if KERAS3:
            scaled = optimizer.scale_loss(loss)
        else:
            scaled = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    if not KERAS3:
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


if __name__ == "__main__":
    rng = np.random.default_rng(16)
    x = rng.normal(size=(256, 10)).astype("float32")
    y = (x @ rng.normal(size=(10, 1))).astype("float32")
    for step in range(8):
        sl = slice(32 * step, 32 * step + 32)
        print(f"step {step} loss {float(train_step(x[sl], y[sl])):.4f}")
