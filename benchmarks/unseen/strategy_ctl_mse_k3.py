"""Delivery-time regression with a custom distributed loop (MirroredStrategy, Keras 3, mixed precision).

Targets are minutes (60-600); the per-example loss is averaged over the global batch."""
import numpy as np
import tensorflow as tf
import keras

GLOBAL_BATCH = 64
STEPS = 40


def setup_devices(n=2):
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)])


def build_model(n_features):
    inputs = keras.Input((n_features,))
    h = keras.layers.Dense(128, activation="relu")(inputs)
    h = keras.layers.Dense(128, activation="relu")(h)
    minutes = keras.layers.Dense(1)(h)
    return keras.Model(inputs, minutes)


def make_dataset(n=2048, n_features=12, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, n_features)).astype("float32")
    w = rng.normal(size=(n_features,)).astype("float32")
    y = (330.0 + 90.0 * np.tanh(x @ w) + rng.normal(scale=10.0, size=n)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y[:, None])).shuffle(n).batch(GLOBAL_BATCH, drop_remainder=True)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = setup_devices()
    with strategy.scope():
        model = build_model(12)
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(3e-3))
        optimizer.build(model.trainable_variables)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            per_example = keras.losses.mean_squared_error(y, pred)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch):
        per_replica = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    dist = strategy.experimental_distribute_dataset(make_dataset().repeat())
    it = iter(dist)
    for step in range(STEPS):
        loss = train_step(next(it))
        if step % 10 == 0 or step == STEPS - 1:
            print(f"step {step} loss {float(loss):.1f} scale {float(optimizer.dynamic_scale.numpy()):.3g}")


if __name__ == "__main__":
    main()
