"""A MultiWorkerMirroredStrategy forecaster of monthly customer spend over 12 months, trained
on a file sorted by customer size and sharded by worker: worker 1 holds the big accounts.

Custom `strategy.run` loop under mixed_float16 with a LossScaleOptimizer. The model's head
keeps the float16 policy, and the per-example loss sums the squared error over the 12 months
in float16, and `compute_average_loss` sums those over the batch in float16. On worker 0
(spend ~10 a month) a batch sums to ~10^4; on worker 1 (spend ~40 to 1000) one account's
squared error alone passes 65504: inf in float16 from step 0, on that worker only.
The fix: the head (or the per-example loss) in float32.
Keras 2 with TF_USE_LEGACY_KERAS=1 (tf.keras is then tf_keras); run it under
`mpfix verify --workers 2` (TF_CONFIG names the worker).
"""
import json
import os

import numpy as np
import tensorflow as tf

keras = tf.keras
KERAS3 = keras.layers.Dense.__module__.startswith("keras.")
MONTHS = 12

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MultiWorkerMirroredStrategy()
GLOBAL_BATCH = 16 * strategy.num_replicas_in_sync
MIXED = keras.mixed_precision.global_policy().name == "mixed_float16"

rng = np.random.default_rng(100)
spend_level = np.sort(rng.lognormal(2.5, 1.2, size=256)).astype("float32")  # sorted by customer size
shard = slice(0, 128) if index == 0 else slice(128, 256)
level = np.random.default_rng(index).permutation(spend_level[shard])  # each worker shuffles its shard
x = np.stack([np.log1p(level), rng.normal(size=128), rng.normal(size=128)], axis=1).astype("float32")
y = (level[:, None] * rng.uniform(0.8, 1.2, size=(128, MONTHS))).astype("float32")

with strategy.scope():
    model = keras.Sequential([
        keras.Input((3,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(MONTHS),
    ])
    optimizer = keras.optimizers.Adam(1e-2)
    if MIXED:
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)


def replica_step(xb, yb):
    with tf.GradientTape() as tape:
        pred = model(xb, training=True)
        per_example = tf.reduce_sum(tf.square(tf.cast(yb, pred.dtype) - pred), axis=1)
        loss = tf.cast(tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH), tf.float32)
        target = (optimizer.scale_loss(loss) if KERAS3 else optimizer.get_scaled_loss(loss)) if MIXED else loss
    grads = tape.gradient(target, model.trainable_variables)
    if MIXED and not KERAS3:
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def train_step(xb, yb):
    losses = strategy.run(replica_step, args=(xb, yb))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


for step in range(40):
    start = (step % 8) * 16
    loss = train_step(tf.constant(x[start:start + 16]), tf.constant(y[start:start + 16]))
print("worker", index, "done, loss", float(loss))
