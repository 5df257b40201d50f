"""Keras 3 custom distributed loop (MirroredStrategy, strategy.run) that logs the loss scale."""
import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
GLOBAL_BATCH = 64

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    inputs = tf.keras.Input((20,))
    h = tf.keras.layers.Dense(256, activation="relu")(inputs)
    h = tf.keras.layers.Dense(256, activation="relu")(h)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(3, dtype="float32")(h))
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))
    loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def step_fn(x, y):
    with tf.GradientTape() as tape:
        per_example = loss_obj(y, model(x, training=True))
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def distributed_step(x, y):
    per_replica = strategy.run(step_fn, args=(x, y))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


if __name__ == "__main__":
    rng = np.random.default_rng(9)
    x = rng.normal(size=(1024, 20)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 1).astype("int64")
    data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))
    for step, (bx, by) in enumerate(data):
        loss = distributed_step(bx, by)
        if step % 4 == 0:
            print(f"step {step} loss {float(loss):.4f} loss scale {float(optimizer.loss_scale):.0f}")
