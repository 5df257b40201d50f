"""Keras 3 custom distributed loop: MirroredStrategy, LossScaleOptimizer built in scope, clipping on the inner optimizer."""
import numpy as np
import tensorflow as tf
import keras

GLOBAL_BATCH = 64


def make_model():
    inputs = keras.Input((28, 28, 1))
    h = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.GlobalMaxPooling2D()(h)
    logits = keras.layers.Dense(10, dtype="float32")(h)
    return keras.Model(inputs, logits)


def run(steps=4):
    keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = make_model()
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9, global_clipnorm=1.0))
        loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.nn.compute_average_loss(loss_obj(labels, logits), global_batch_size=GLOBAL_BATCH)
            loss += tf.nn.scale_regularization_loss(tf.add_n([tf.nn.l2_loss(w) for w in model.trainable_weights if "kernel" in w.path]) * 1e-4)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(images, labels):
        per_replica = strategy.run(replica_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    rng = np.random.default_rng(14)
    x = rng.uniform(size=(GLOBAL_BATCH * steps, 28, 28, 1)).astype("float32")
    y = rng.integers(0, 10, size=(GLOBAL_BATCH * steps,))
    ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))
    for images, labels in ds:
        print("loss", float(train_step(images, labels)))


if __name__ == "__main__":
    run()
