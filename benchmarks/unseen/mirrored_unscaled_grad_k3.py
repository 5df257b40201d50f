"""Keras 3 MirroredStrategy loop: per-replica step under strategy.run, mean loss reduced across replicas."""
import numpy as np
import tensorflow as tf
import keras

keras.mixed_precision.set_global_policy("mixed_float16")
GLOBAL_BATCH, FEATURES = 128, 32

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(256, activation="gelu"),
            keras.layers.Dense(256, activation="gelu"),
            keras.layers.Dense(1, dtype="float32"),
        ]
    )
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))


def replica_step(features, target):
    with tf.GradientTape() as tape:
        pred = tf.squeeze(model(features, training=True), -1)
        per_example = tf.square(pred - target)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        scaled_loss = optimizer.scale_loss(loss)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def distributed_step(features, target):
    per_replica = strategy.run(replica_step, args=(features, target))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


if __name__ == "__main__":
    rng = np.random.default_rng(6)
    x = rng.normal(size=(GLOBAL_BATCH * 8, FEATURES)).astype("float32")
    y = (x[:, :4].sum(axis=1) * 0.5).astype("float32")
    ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))
    for epoch in range(3):
        losses = [float(distributed_step(f, t)) for f, t in ds]
        print(f"epoch {epoch} loss {np.mean(losses):.4f}")
