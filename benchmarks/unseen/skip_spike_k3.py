"""Keras 3 custom loop with a loss-spike guard: a step whose gradient norm is above MAX_NORM is skipped."""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")
MAX_NORM = 50.0


def build_model():
    inputs = keras.Input((24,))
    h = keras.layers.Dense(96, activation="gelu")(inputs)
    h = keras.layers.LayerNormalization()(h)
    h = keras.layers.Dense(96, activation="gelu")(h)
    outputs = keras.layers.Dense(1, dtype="float32")(h)
    return keras.Model(inputs, outputs)


model = build_model()
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.02, momentum=0.9))
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    grad_norm = tf.linalg.global_norm(grads)
    if grad_norm < MAX_NORM:
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss, grad_norm


rng = np.random.default_rng(3)
x = rng.normal(size=(1024, 24)).astype("float32")
w = rng.normal(size=(24, 1)).astype("float32")
y = np.tanh(x @ w / 4.0) + 0.05 * rng.normal(size=(1024, 1)).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=3).batch(64).prefetch(tf.data.AUTOTUNE)
for epoch in range(4):
    skipped, losses = 0, []
    for xb, yb in ds:
        loss, norm = train_step(xb, yb)
        losses.append(float(loss))
        skipped += int(float(norm) >= MAX_NORM)
    print(f"epoch {epoch} loss {np.mean(losses):.4f} skipped {skipped} last_norm {float(norm):.1f}")
