"""Child side: carries per-step measurements out of eager code and out of graphs.

Inside a ``tf.function`` (and inside XLA clusters: Keras 3 ``fit`` compiles its train
step with ``jit_compile=True`` by default on TensorFlow) the hooks only see symbolic
tensors, and ``tf.py_function`` cannot run under XLA. So each measured step writes one
row into a ring buffer held in plain resource variables, and the Python side reads it
back from eager code.

Reading is the expensive part (every eager read is an op dispatch, and the whole ring
buffer is a few hundred kB), so it is split in two:

* after every outermost ``tf.function`` call the Python side reads only ``state``, four
  int64 counters (``poll``: one raw ``ReadVariableOp``, about 10 µs on CPU): rows
  written, steps, alarms (rows that must stop the run: a non-finite loss, or non-finite
  gradients applied without a dynamic loss scaler) and the set of optimizers that
  applied in the current step;
* the rows themselves are read (``drain``) only when the Python side needs them: an
  alarm, the step limit reached, a batch of rows waiting, some time passed, or the end
  of the run (see ``Recorder.flush``).

Steps: one apply of an optimizer that has not applied yet in the current step joins
that step; an optimizer applying a second time starts the next step. With one optimizer
every apply is a step; a GAN's discriminator and generator updates form one step; a
critic updated five times per generator update gives five steps (the last holding the
generator's row too).

Under ``MirroredStrategy`` with several replicas in this process (the replica id is a
constant of each replica's graph), replica 0 writes the step's row and every replica also
writes its own small row (loss, gradient counts, float16 peak) into a second ring, at its
own update count; ``drain`` merges them into the step's row, so a NaN on replica 1 only is
the step's NaN, at that step (the replica ids it came from ride along). With one replica
(no strategy, or one device per worker of ``MultiWorkerMirroredStrategy``) there is no
second ring.

The variables are built as ``ResourceVariable`` directly, under ``tf.init_scope``: that
lifts their creation out of any graph being traced and bypasses the variable creator of
a distribution strategy, so one buffer serves every replica.
"""

from __future__ import annotations

import threading

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import gen_resource_variable_ops, resource_variable_ops

# Row layout (float32). Keep in step with ``Recorder._write`` (fills a row after ``optimizer`` and
# ``step``, which ``Channel.write`` adds) and ``Recorder._record`` (reads one) in _recorder.py;
# tests/verify/test_channel_layout.py checks both against this tuple.
FIELDS = (
    "optimizer",
    "step",
    "loss",
    "loss_seq",
    "scale",
    "dynamic",
    "elements",
    "nonfinite",
    "zeros",
    "sumsq",
    # Headroom: the largest |value| of the step's float16 layer outputs (-1: none measured)
    # and the index of that layer.
    "act_max",
    "act_layer",
)
WIDTH = len(FIELDS)
# Enough rows for a whole-loop tf.function running a few thousand steps between reads.
CAPACITY = 8192
# state = [rows written, steps, alarms, optimizers seen in the current step (bit mask)]
WRITTEN, STEPS, ALARMS, MASK = range(4)
# Optimizers beyond this index share the last bit (a step is then counted per apply of
# any of them, never missed).
MAX_OPTIMIZER_BIT = 62


# Per-replica row: loss, elements, non-finite, zeros, sum of squares, float16 peak, its layer.
REPLICA_FIELDS = ("loss", "elements", "nonfinite", "zeros", "sumsq", "act_max", "act_layer")
REPLICA_WIDTH = len(REPLICA_FIELDS)
MAX_REPLICAS = 16
REPLICA_CAPACITY = 1024


def _ops(update) -> list:
    """The op of a variable update, for ``tf.control_dependencies`` (eager: none, ops run in order)."""
    return [] if tf.executing_eagerly() else [update.op]


class Channel:
    """Ring buffer of measurement rows, its counters, and the pending loss."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._vars: tuple | None = None
        self._state_handle = None
        self.read = 0
        # Replicas of a MirroredStrategy in this process (set by the hooks; 1: none).
        self.replicas = 1
        self._replica_vars: tuple | None = None

    def _variables(self):
        if self._vars is None:
            with self._lock, tf.init_scope():
                if self._vars is None:
                    new = resource_variable_ops.ResourceVariable
                    rows = new(tf.zeros([CAPACITY, WIDTH]), trainable=False, name="mpfix_rows")
                    state = new(tf.zeros([4], tf.int64), trainable=False, name="mpfix_state")
                    # [loss of the step being computed, how many losses were set so far]
                    pending = new(tf.zeros([2]), trainable=False, name="mpfix_pending")
                    self._state_handle = state.handle
                    self._vars = (rows, state, pending)
        return self._vars

    # --- graph or eager side (replica 0 only) ---
    def set_loss(self, value):
        """Remember ``value`` as the loss of the step being computed."""
        _, _, pending = self._variables()
        seq = pending.read_value()[1]
        pending.assign(tf.stack([tf.cast(value, tf.float32), seq + 1.0]))

    def pending_loss(self):
        """(loss, sequence number) of the last ``set_loss``."""
        _, _, pending = self._variables()
        return tf.unstack(pending.read_value())

    def write(self, optimizer: int, values, alarm):
        """Append a row ``[optimizer, step, *values]``; ``alarm`` (a bool tensor) asks the
        Python side to read the rows at once. Returns nothing (in a graph the writes are
        stateful ops, kept in program order by automatic control dependencies)."""
        rows, state, _ = self._variables()
        written, steps, alarms, mask = tf.unstack(state.read_value())
        bit = tf.constant(1 << min(optimizer, MAX_OPTIMIZER_BIT), tf.int64)
        new_step = tf.logical_or(
            tf.equal(steps, 0), tf.not_equal(tf.bitwise.bitwise_and(mask, bit), 0)
        )
        steps = steps + tf.cast(new_step, tf.int64)
        mask = tf.where(new_step, bit, tf.bitwise.bitwise_or(mask, bit))
        alarms = alarms + tf.cast(alarm, tf.int64)
        row = tf.stack([tf.constant(float(optimizer)), tf.cast(steps - 1, tf.float32), *values])
        slot = tf.math.floormod(written, CAPACITY)
        counters = tf.stack([written + 1, steps, alarms, mask])
        row_written = rows.scatter_nd_update(tf.reshape(slot, [1, 1]), tf.reshape(row, [1, WIDTH]))
        # The count is published after its row: the watchdog thread reads the count, then the
        # rows, while a step runs, and nothing else orders two variables' updates in a graph
        # (the count can be ready first: it waits on the loss, the row on the gradients' sums).
        # A count ahead of its row read a row of zeros, marked read: a NaN run was "healthy,
        # 1 step" in 2 of 4 verifies of a held-out script (turn 10, gem_pool_k3.py).
        with tf.control_dependencies(_ops(row_written)):
            state.assign(counters)

    def _replica_variables(self):
        if self._replica_vars is None:
            with self._lock, tf.init_scope():
                if self._replica_vars is None:
                    new = resource_variable_ops.ResourceVariable
                    rows = new(tf.zeros([REPLICA_CAPACITY, MAX_REPLICAS, REPLICA_WIDTH]), trainable=False, name="mpfix_replica_rows")
                    counts = new(tf.zeros([MAX_REPLICAS], tf.int64), trainable=False, name="mpfix_replica_counts")
                    pending = new(tf.zeros([MAX_REPLICAS]), trainable=False, name="mpfix_replica_pending")
                    self._replica_vars = (rows, counts, pending)
        return self._replica_vars

    def set_replica_loss(self, replica: int, value):
        """``set_loss`` of replica ``replica`` (> 0)."""
        _, _, pending = self._replica_variables()
        pending.scatter_nd_update([[min(replica, MAX_REPLICAS - 1)]], tf.reshape(tf.cast(value, tf.float32), [1]))

    def replica_loss(self, replica: int):
        _, _, pending = self._replica_variables()
        return pending.read_value()[min(replica, MAX_REPLICAS - 1)]

    def write_replica(self, replica: int, values, alarm):
        """Replica ``replica``'s own row for its next update; ``alarm`` as in ``write``."""
        rows, counts, _ = self._replica_variables()
        _, state, _ = self._variables()
        replica = min(replica, MAX_REPLICAS - 1)
        count = counts.read_value()[replica]
        slot = tf.math.floormod(count, REPLICA_CAPACITY)
        index = tf.stack([slot, tf.constant(replica, tf.int64)])
        alarm = tf.reshape(tf.cast(alarm, tf.int64), [1])
        row = tf.reshape(tf.stack([tf.cast(v, tf.float32) for v in values]), [1, REPLICA_WIDTH])
        row_written = rows.scatter_nd_update(tf.reshape(index, [1, 2]), row)
        with tf.control_dependencies(_ops(row_written)):  # the count after its row, as in ``write``
            counts.scatter_nd_add([[replica]], tf.constant([1], tf.int64))
            state.scatter_nd_add([[ALARMS]], alarm)

    def _merge_replicas(self, start: int, rows: list[list[float]]) -> list[list]:
        """Rows ``start``.. with every replica's values merged in (see the module doc);
        each row gets one more item: the replicas with a non-finite loss or gradient."""
        if self._replica_vars is None or self.replicas <= 1 or not rows:
            return rows
        reps, counts, _ = self._replica_vars
        count = gen_resource_variable_ops.read_variable_op(counts.handle, tf.int64)._numpy()
        end = start + len(rows)
        # Replica 0 writes its own row beside every main row: the counts agree, or the
        # rows cannot be matched (then they are left as they are).
        if count[0] != end:
            return rows
        slots = [i % REPLICA_CAPACITY for i in range(start, end)]
        block = reps.sparse_read(slots)._numpy()
        out = []
        for k, (row, mine) in enumerate(zip(rows, block)):
            live = [r for r in range(min(self.replicas, MAX_REPLICAS)) if count[r] > start + k]
            row = list(row)
            values = [mine[r] for r in live]
            bad = [r for r, v in zip(live, values) if not np.isfinite(v[0]) or v[2] > 0]
            losses = [float(v[0]) for v in values]
            nonfinite = [x for x in losses if not np.isfinite(x)]
            loss_at = FIELDS.index("loss")
            if nonfinite:
                row[loss_at] = nonfinite[0]
            elif losses and row[FIELDS.index("loss_seq")] > 0:
                row[loss_at] = float(np.mean(losses))
            for name in ("elements", "nonfinite", "zeros", "sumsq"):
                row[FIELDS.index(name)] = float(sum(v[REPLICA_FIELDS.index(name)] for v in values))
            peaks = [v for v in values if v[5] >= 0 or not np.isfinite(v[5])]
            if peaks:
                top = max(peaks, key=lambda v: v[5] if np.isfinite(v[5]) else np.inf)
                row[FIELDS.index("act_max")], row[FIELDS.index("act_layer")] = float(top[5]), float(top[6])
            row.append(bad)
            out.append(row)
        return out

    # --- Python side (eager code only) ---
    def poll(self):
        """``[rows written, steps, alarms, mask]`` as Python ints, or None before the
        first measured step. One raw variable read: cheap enough for every call."""
        if self._state_handle is None:
            return None
        return gen_resource_variable_ops.read_variable_op(self._state_handle, tf.int64)._numpy().tolist()

    def drain(self, written: int) -> list[list[float]]:
        """Rows ``self.read`` .. ``written`` (as polled), oldest first; rows overwritten
        in the ring before they were read are lost (the newest CAPACITY are kept)."""
        if self._vars is None or written <= self.read:
            return []
        rows = self._vars[0]
        with self._lock:
            start = max(self.read, written - CAPACITY)
            values = gen_resource_variable_ops.read_variable_op(rows.handle, tf.float32)._numpy()
            self.read = written
        begin, end = start % CAPACITY, written % CAPACITY
        if written - start == CAPACITY or end <= begin:
            block = list(values[begin:]) + list(values[:end])
        else:
            block = values[begin:end]
        return self._merge_replicas(start, [row.tolist() for row in block])
