"""tf_keras MirroredStrategy loop with a CheckpointManager; the loss scale is saved and restored."""
import os
import tempfile

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

GLOBAL_BATCH = 32
keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
    model = keras.Sequential([
        keras.layers.Embedding(500, 32, input_length=20),
        keras.layers.GRU(64),
        keras.layers.Dense(3, dtype="float32"),
    ])
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)

manager = tf.train.CheckpointManager(ckpt, tempfile.mkdtemp(), max_to_keep=2)


def replica_step(tokens, labels):
    with tf.GradientTape() as tape:
        logits = model(tokens, training=True)
        loss = tf.nn.compute_average_loss(loss_obj(labels, logits), global_batch_size=GLOBAL_BATCH)
        scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
    grads, _ = tf.clip_by_global_norm(grads, 5.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def train_step(tokens, labels):
    per_replica = strategy.run(replica_step, args=(tokens, labels))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


rng = np.random.default_rng(19)
tokens = rng.integers(0, 500, size=(GLOBAL_BATCH * 10, 20)).astype("int32")
labels = (tokens[:, 0] % 3).astype("int32")
ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((tokens, labels)).batch(GLOBAL_BATCH))
for epoch in range(2):
    losses = [float(train_step(t, l)) for t, l in ds]
    print(f"epoch {epoch} loss {np.mean(losses):.4f} scale {float(optimizer.loss_scale):.0f}")
    manager.save()

ckpt.restore(manager.latest_checkpoint)
print("restored, loss scale", float(optimizer.loss_scale))
