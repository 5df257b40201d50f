"""Image classifier trained with MirroredStrategy and a custom distributed loop (ported from TF 2.3)."""
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 64


def make_model():
    return tf.keras.Sequential(
        [
            tf.keras.layers.Conv2D(32, 3, activation="relu", input_shape=(32, 32, 3)),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(10),
            tf.keras.layers.Activation("linear", dtype="float32"),
        ]
    )


def main():
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = tf.distribute.MirroredStrategy()
    rng = np.random.default_rng(8)
    x = rng.uniform(size=(256, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=(256,))
    dist_ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))

    with strategy.scope():
        model = make_model()
        optimizer = tf.keras.optimizers.SGD(0.01, momentum=0.9)
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer, loss_scale="dynamic")
        loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            per_example = loss_obj(labels, model(images, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def dist_step(images, labels):
        losses = strategy.run(replica_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    for images, labels in dist_ds:
        print("loss", float(dist_step(images, labels)))


if __name__ == "__main__":
    main()
