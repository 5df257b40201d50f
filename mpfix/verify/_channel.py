"""Child side: carries per-step measurements out of eager code and out of graphs.

Inside a ``tf.function`` (and inside XLA clusters: Keras 3 ``fit`` compiles its train
step with ``jit_compile=True`` by default on TensorFlow) the hooks only see symbolic
tensors, and ``tf.py_function`` cannot run under XLA. So each measured step writes one
row into a ring buffer held in two plain resource variables; the Python side reads the
new rows after every outermost ``tf.function`` call returns (``flush``). In eager code the
row is read at once.

The variables are built as ``ResourceVariable`` directly, under ``tf.init_scope``: that
lifts their creation out of any graph being traced and bypasses the variable creator of
a distribution strategy, so one buffer serves every replica of a ``MirroredStrategy``
(each row carries its replica id).
"""

from __future__ import annotations

import threading

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

# Row layout (float32). Keep in step with ``Recorder._decode`` in _hooks.py.
FIELDS = (
    "replica",
    "optimizer",
    "loss",
    "loss_seq",
    "scale",
    "dynamic",
    "elements",
    "nonfinite",
    "zeros",
    "sumsq",
)
WIDTH = len(FIELDS)
# Enough rows for a whole-loop tf.function running a few thousand steps between reads.
CAPACITY = 8192
# Replica ids are folded into this many loss slots (MirroredStrategy on one host).
MAX_REPLICAS = 16


class Channel:
    """Ring buffer of measurement rows plus the pending loss of each replica."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._vars: tuple | None = None
        self._read = 0

    def _variables(self):
        if self._vars is None:
            with self._lock, tf.init_scope():
                if self._vars is None:
                    new = resource_variable_ops.ResourceVariable
                    self._vars = (
                        new(tf.zeros([CAPACITY, WIDTH]), trainable=False, name="mpfix_rows"),
                        new(tf.constant(0, tf.int64), trainable=False, name="mpfix_count"),
                        new(tf.zeros([MAX_REPLICAS]), trainable=False, name="mpfix_loss"),
                        new(tf.zeros([MAX_REPLICAS]), trainable=False, name="mpfix_loss_seq"),
                    )
        return self._vars

    def set_loss(self, replica, value):
        """Remember ``value`` as the loss of the step this replica is computing."""
        _, _, loss, seq = self._variables()
        index = tf.reshape(replica, [1, 1])
        loss.scatter_nd_update(index, tf.reshape(value, [1]))
        seq.scatter_nd_add(index, tf.ones([1]))

    def pending_loss(self, replica):
        _, _, loss, seq = self._variables()
        return tf.gather(loss.read_value(), replica), tf.gather(seq.read_value(), replica)

    def write(self, row):
        """Append a row; returns nothing (in a graph the write is a stateful op)."""
        rows, count, _, _ = self._variables()
        index = count.assign_add(1) - 1
        slot = tf.math.floormod(index, CAPACITY)
        rows.scatter_nd_update(tf.reshape(slot, [1, 1]), tf.reshape(row, [1, WIDTH]))

    def drain(self) -> list[list[float]]:
        """Rows written since the last drain, oldest first (call from eager code only)."""
        if self._vars is None:
            return []
        rows, count, _, _ = self._vars
        with self._lock:
            total = int(count.numpy())
            if total == self._read:
                return []
            start = max(self._read, total - CAPACITY)
            values = rows.numpy()
            self._read = total
        return [values[i % CAPACITY].tolist() for i in range(start, total)]
