"""tf_keras MirroredStrategy custom loop; the optimizer is created with the other training objects."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

GLOBAL_BATCH = 64


def make_model():
    return keras.Sequential([
        keras.layers.Conv2D(32, 3, activation="relu", input_shape=(32, 32, 3)),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10, dtype="float32"),
    ])


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = tf.distribute.MirroredStrategy()
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    with strategy.scope():
        model = make_model()
        accuracy = keras.metrics.SparseCategoricalAccuracy()

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.nn.compute_average_loss(loss_obj(labels, logits), global_batch_size=GLOBAL_BATCH)
            scaled_loss = optimizer.get_scaled_loss(loss)
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        accuracy.update_state(labels, logits)
        return loss

    @tf.function
    def train_step(images, labels):
        per_replica = strategy.run(replica_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    rng = np.random.default_rng(9)
    x = rng.uniform(size=(GLOBAL_BATCH * 8, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=(GLOBAL_BATCH * 8,))
    ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))
    for epoch in range(2):
        losses = [float(train_step(bx, by)) for bx, by in ds]
        print(f"epoch {epoch} loss {np.mean(losses):.4f} acc {float(accuracy.result()):.3f}")


if __name__ == "__main__":
    main()
