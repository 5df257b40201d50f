"""One worker of a MultiWorkerMirroredStrategy cluster (TF_CONFIG names it): a custom
`strategy.run` loop under mixed_float16 with a LossScaleOptimizer, a fault injected on one
worker at one step. (Keras 3.15's `fit` fails under this strategy before its first step.)

--fault: none | nan (a NaN input batch) | overflow (inputs x 1e6: float16 activations
overflow) | underflow (a loss weighted 1e-7 and no loss scaling) | crash (RuntimeError) |
hang (the worker sleeps forever) | slow (the worker's step S ends --pause seconds late, after
its last collective: its peers are done before it). --worker K --at S: where and when.
--lso outside: the LossScaleOptimizer is built before strategy.scope().
Keras 2 with TF_USE_LEGACY_KERAS=1 (tf.keras is then tf_keras).
"""
import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

keras = tf.keras
KERAS3 = keras.layers.Dense.__module__.startswith("keras.")

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
parser.add_argument("--fault", default="none", choices=["none", "nan", "overflow", "underflow", "crash", "hang", "slow"])
parser.add_argument("--worker", type=int, default=1)
parser.add_argument("--at", type=int, default=3)
parser.add_argument("--pause", type=float, default=3.0)
parser.add_argument("--lso", default="inside", choices=["inside", "outside"])
args = parser.parse_args()

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MultiWorkerMirroredStrategy()
faulty = index == args.worker
GLOBAL_BATCH = 16 * strategy.num_replicas_in_sync
scaled = args.fault != "underflow"
weight = 1e-7 if args.fault == "underflow" else 1.0

rng = np.random.default_rng(7 + index)
x = rng.normal(size=(64, 8)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")


def make_optimizer():
    inner = keras.optimizers.SGD(0.1)
    return keras.mixed_precision.LossScaleOptimizer(inner) if scaled else inner


optimizer = make_optimizer() if args.lso == "outside" else None
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, dtype="float32")]
    )
    optimizer = optimizer or make_optimizer()


def replica_step(xb, yb):
    with tf.GradientTape() as tape:
        per_example = tf.square(yb - model(xb, training=True))[:, 0]
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH) * weight
        scaled_loss = (optimizer.scale_loss(loss) if KERAS3 else optimizer.get_scaled_loss(loss)) if scaled else loss
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    if scaled and not KERAS3:
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


late = tf.Variable(0.0, trainable=False)  # --fault slow: seconds this step ends late


def pause(seconds, after):
    time.sleep(float(seconds))
    return after


@tf.function
def train_step(xb, yb):
    losses = strategy.run(replica_step, args=(xb, yb))
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)
    return tf.numpy_function(pause, [late, total], tf.float32)  # after the step's last collective


for step in range(args.steps):
    xb, yb = x[(step % 4) * 16 : (step % 4) * 16 + 16], y[(step % 4) * 16 : (step % 4) * 16 + 16]
    if faulty and step == args.at:
        if args.fault == "nan":
            xb = xb * np.float32("nan")
        elif args.fault == "overflow":
            xb = xb * np.float32(1e6)
        elif args.fault == "crash":
            raise RuntimeError(f"worker {index} failed at step {step}")
        elif args.fault == "hang":
            time.sleep(3600)
    late.assign(args.pause if faulty and step == args.at and args.fault == "slow" else 0.0)
    loss = train_step(tf.constant(xb), tf.constant(yb))
print("worker", index, "done, loss", float(loss))
