"""Graph message passing (tf_keras): mean aggregation written as a segment sum divided by the degree.

A hub node receives messages from 3000 neighbours; the float16 segment sum of messages ~30 passes
65504 before the division by the degree brings it back: inf, then NaN. Nothing in the code says how
many edges meet at one node. Custom loop with tf_keras' LossScaleOptimizer.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")

N_NODES, HUB_DEGREE, OTHER_EDGES = 200, 3000, 800
rng = np.random.default_rng(3)
features = (rng.normal(size=(N_NODES, 8)) + 3.0).astype("float32")
targets = rng.normal(size=(N_NODES, 1)).astype("float32")
src = np.concatenate([rng.integers(1, N_NODES, HUB_DEGREE), rng.integers(0, N_NODES, OTHER_EDGES)]).astype("int32")
dst = np.concatenate([np.zeros(HUB_DEGREE, "int32"), rng.integers(1, N_NODES, OTHER_EDGES).astype("int32")])
degree = np.bincount(dst, minlength=N_NODES).astype("float32")[:, None]


class MeanAggregate(keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.message = keras.layers.Dense(units, activation="relu", kernel_initializer=keras.initializers.Constant(1.0))
        self.update = keras.layers.Dense(units, activation="relu")

    def call(self, h, src, dst, degree):
        messages = self.message(tf.gather(h, src))
        summed = tf.math.unsorted_segment_sum(messages, dst, N_NODES)
        mean = summed / tf.cast(tf.maximum(degree, 1.0), summed.dtype)
        return self.update(tf.concat([h, mean], axis=-1))


layer = MeanAggregate(16)
head = keras.layers.Dense(1, dtype="float32")
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))


@tf.function
def train_step():
    with tf.GradientTape() as tape:
        h = layer(tf.constant(features), tf.constant(src), tf.constant(dst), tf.constant(degree))
        loss = tf.reduce_mean(tf.square(head(h) - targets))
        scaled = optimizer.get_scaled_loss(loss)
    variables = layer.trainable_variables + head.trainable_variables
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, variables))
    optimizer.apply_gradients(zip(grads, variables))
    return loss


for step in range(30):
    loss = train_step()
print("loss", float(loss))
