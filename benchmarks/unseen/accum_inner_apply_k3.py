"""Keras 3 custom loop with gradient accumulation over micro-batches into float32 variables."""
import numpy as np
import tensorflow as tf
import keras

ACCUM_STEPS = 4

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential([
    keras.Input((28, 28, 1)),
    keras.layers.Conv2D(16, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(10, dtype="float32"),
])
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
accumulators = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False) for v in model.trainable_variables]


@tf.function
def micro_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True)) / ACCUM_STEPS
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    for acc, g in zip(accumulators, grads):
        acc.assign_add(tf.cast(g, tf.float32))
    return loss


@tf.function
def apply_accumulated():
    # step the wrapped optimizer directly so the loss-scale counter only moves once per real step
    optimizer.inner_optimizer.apply_gradients(zip(accumulators, model.trainable_variables))
    for acc in accumulators:
        acc.assign(tf.zeros_like(acc))


rng = np.random.default_rng(8)
x = rng.uniform(size=(512, 28, 28, 1)).astype("float32")
y = (x[:, :14].mean(axis=(1, 2, 3)) * 20).astype("int32") % 10
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
for epoch in range(3):
    total = 0.0
    for i, (bx, by) in enumerate(ds):
        total += float(micro_step(bx, by)) * ACCUM_STEPS
        if (i + 1) % ACCUM_STEPS == 0:
            apply_accumulated()
    print(f"epoch {epoch} loss {total / (i + 1):.4f}")
