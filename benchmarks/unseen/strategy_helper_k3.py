"""Keras 3 data-parallel custom loop on two logical CPUs (stand-in for two GPUs)."""
import numpy as np
import tensorflow as tf
import keras

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)

HPARAMS = dict(lr=3e-3, warmup=20, batch_per_replica=32, steps=12)


def build_optimizer(hp):
    schedule = keras.optimizers.schedules.CosineDecay(0.0, decay_steps=200, warmup_target=hp["lr"], warmup_steps=hp["warmup"])
    return keras.optimizers.LossScaleOptimizer(keras.optimizers.AdamW(schedule, weight_decay=1e-4))


def build_model():
    inputs = keras.Input((64,))
    h = keras.layers.Dense(256, activation="relu")(inputs)
    h = keras.layers.Dropout(0.1)(h)
    h = keras.layers.Dense(256, activation="relu")(h)
    return keras.Model(inputs, keras.layers.Dense(8, dtype="float32")(h))


keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
global_batch = HPARAMS["batch_per_replica"] * strategy.num_replicas_in_sync
optimizer = build_optimizer(HPARAMS)
with strategy.scope():
    model = build_model()
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    optimizer.build(model.trainable_variables)


def replica_step(x, y):
    with tf.GradientTape() as tape:
        per_example = loss_obj(y, model(x, training=True))
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def distributed_step(x, y):
    losses = strategy.run(replica_step, args=(x, y))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


rng = np.random.default_rng(21)
x = rng.normal(size=(global_batch * HPARAMS["steps"], 64)).astype("float32")
y = (x[:, :8] * 3).argmax(axis=1)
dist_ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch))
for step, (xb, yb) in enumerate(dist_ds):
    print("step", step, "loss", float(distributed_step(xb, yb)))
