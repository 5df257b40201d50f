"""Keras 3: micro-batch gradients of `scale_loss` summed into float32 variables, then stepped through
`optimizer.inner_optimizer`, which neither unscales them nor skips a non-finite step."""
import numpy as np
import tensorflow as tf
import keras

ACCUM = 2
keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(4, dtype="float32")])
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.05))
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
sums = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False) for v in model.trainable_variables]


@tf.function
def micro_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True)) / ACCUM
        scaled = optimizer.scale_loss(loss)
    for total, g in zip(sums, tape.gradient(scaled, model.trainable_variables)):
        total.assign_add(tf.cast(g, tf.float32))
    return loss


@tf.function
def apply_sums():
    optimizer.inner_optimizer.apply_gradients(zip(sums, model.trainable_variables))
    for total in sums:
        total.assign(tf.zeros_like(total))


rng = np.random.default_rng(3)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int32") + 2 * (x[:, 1] > 0).astype("int32")
for i, (bx, by) in enumerate(tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat(4)):
    micro_step(bx, by)
    if (i + 1) % ACCUM == 0:
        apply_sums()
