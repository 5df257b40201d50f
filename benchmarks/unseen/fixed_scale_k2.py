"""tf_keras regression loop with a fixed loss scale (no dynamic adjustment, for reproducibility)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential([
    keras.layers.Dense(256, activation="relu", input_shape=(8,)),
    keras.layers.Dense(256, activation="relu"),
    keras.layers.Dense(1, dtype="float32"),
])
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3), dynamic=False, initial_scale=2 ** 15)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        loss = tf.reduce_mean(tf.square(y - pred))
        scaled_loss = optimizer.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = optimizer.get_unscaled_gradients(scaled_grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.default_rng(21)
x = rng.uniform(0, 10, size=(1024, 8)).astype("float32")
y = (x ** 2).sum(axis=1, keepdims=True).astype("float32")  # house-size style targets, a few hundred
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(128)
for epoch in range(5):
    losses = [float(train_step(bx, by)) for bx, by in ds]
    print(f"epoch {epoch} loss {np.mean(losses):.2f}")
