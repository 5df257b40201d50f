"""Keras 3 custom distributed loop (MirroredStrategy over 2 logical CPUs) with mixed precision,
global-norm clipping on the inner optimizer and a per-example loss averaged over the global batch."""
import numpy as np
import tensorflow as tf
import keras

GLOBAL_BATCH = 64


def make_strategy():
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def build_model():
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
        keras.layers.Activation("softmax", dtype="float32"),
    ])


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = make_strategy()
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(2e-3, global_clipnorm=1.0))
        optimizer.build(model.trainable_variables)
        loss_obj = keras.losses.SparseCategoricalCrossentropy(reduction=None)
        accuracy = keras.metrics.SparseCategoricalAccuracy()

    def step_fn(images, labels):
        with tf.GradientTape() as tape:
            probs = model(images, training=True)
            loss = tf.nn.compute_average_loss(loss_obj(labels, probs), global_batch_size=GLOBAL_BATCH)
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        accuracy.update_state(labels, probs)
        return loss

    @tf.function
    def distributed_step(images, labels):
        losses = strategy.run(step_fn, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, size=1280)
    images = rng.random((1280, 28, 28, 1)).astype("float32") * 0.3
    for k in range(10):
        images[labels == k, 2 * k:2 * k + 6, 2 * k:2 * k + 6, 0] += 0.7
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(1280).batch(GLOBAL_BATCH, drop_remainder=True)
    dist_ds = strategy.experimental_distribute_dataset(ds)
    for epoch in range(3):
        total, n = 0.0, 0
        for images_b, labels_b in dist_ds:
            total += float(distributed_step(images_b, labels_b))
            n += 1
        print(f"epoch {epoch}: loss {total / n:.4f} acc {float(accuracy.result()):.3f} "
              f"scale {float(optimizer.dynamic_scale.numpy()):.0f}")
        accuracy.reset_state()


if __name__ == "__main__":
    main()
