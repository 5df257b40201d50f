"""Child side: the in-graph ops of one measured step, and which replica runs them.

Under a ``tf.distribute`` strategy every replica traces the hooks; replica 0 writes the
step's row and, under ``MirroredStrategy`` (replica ids that are constants of their graph),
each other replica writes its own replica row (see ``_channel``). The gradients of a step
are summarised in-graph (elements, non-finite count, exact zeros, sum of squares) so only a
few floats per step leave the graph.
"""

from __future__ import annotations

import tensorflow as tf


def _same_graph(tensor) -> bool:
    """Whether ``tensor`` can be used here: an eager tensor in eager code, or a tensor of
    the graph being built."""
    try:
        graph = tensor.graph  # eager tensors have none (AttributeError)
    except AttributeError:
        graph = None
    if tf.executing_eagerly():
        return graph is None
    try:
        return graph is tf.compat.v1.get_default_graph()
    except Exception:
        return False



def _replica_id():
    """This replica's id: a Python int when it is a constant of the graph (no strategy,
    ``MirroredStrategy``), else a tensor."""
    ctx = tf.distribute.get_replica_context()
    if ctx is None:
        return 0
    # The id within this process (MultiWorkerMirroredStrategy's replica_id_in_sync_group
    # counts the other workers' replicas first: worker 1's only replica is 1).
    rid = getattr(ctx, "_local_replica_id", None)
    if rid is None:
        rid = ctx.replica_id_in_sync_group
    static = tf.get_static_value(rid)
    return int(static) if static is not None else tf.cast(rid, tf.int32)


def _local_replicas() -> int:
    """Replicas of the current strategy in this process (1 without one)."""
    ctx = tf.distribute.get_replica_context()
    if ctx is None or not tf.distribute.has_strategy():
        return 1
    try:
        return max(1, len(ctx.strategy.extended.worker_devices))
    except Exception:
        return 1


def _on_replica0(fn, *args, other=None):
    """Run the measuring ops ``fn`` on replica 0; ``other(replica, *args)`` on the other
    replicas when their id is a constant of their graph (MirroredStrategy)."""
    replica = _replica_id()
    if isinstance(replica, int):
        if replica == 0:
            fn(*args)
        elif other is not None:
            other(replica, *args)
        return

    def measure():
        fn(*args)
        return tf.constant(True)

    tf.cond(tf.equal(replica, 0), measure, lambda: tf.constant(False))


def _flat_tensors(structure):
    return [t for t in tf.nest.flatten(structure) if t is not None]


# Gradients up to this many entries in all are concatenated and summarised by one set of
# reductions (fewer ops per step for small models); bigger ones one tensor at a time (no
# copy of every gradient).
CONCAT_MAX_ELEMENTS = 1 << 20


def _float_grads(grads):
    out = []
    for g in grads:
        if g is None:
            continue
        if isinstance(g, tf.IndexedSlices):
            g = g.values
        g = tf.convert_to_tensor(g)
        if g.dtype.is_floating:
            out.append(g if g.dtype == tf.float32 else tf.cast(g, tf.float32))
    return out


def _summarise(g):
    """(elements, non-finite, exact zeros, sum of squares) of one float32 tensor; the
    sum of squares is non-finite when any entry is (the caller then ignores it)."""
    size = g.shape.num_elements()
    elements = tf.constant(float(size)) if size is not None else tf.cast(tf.size(g), tf.float32)
    finite = tf.reduce_sum(tf.cast(tf.math.is_finite(g), tf.float32))
    zeros = tf.reduce_sum(tf.cast(tf.equal(g, 0.0), tf.float32))
    return elements, elements - finite, zeros, tf.reduce_sum(tf.square(g))


def _gradient_summary(grads, scale):
    """In-graph totals over all gradients: elements, non-finite, exact zeros, sum of
    squares divided by ``scale**2`` (the loss scale still in them)."""
    grads = _float_grads(grads)
    if not grads:
        zero = tf.constant(0.0)
        return zero, zero, zero, zero
    sizes = [g.shape.num_elements() for g in grads]
    if len(grads) > 1 and None not in sizes and sum(sizes) <= CONCAT_MAX_ELEMENTS:
        parts = [_summarise(tf.concat([tf.reshape(g, [-1]) for g in grads], 0))]
    else:
        parts = [_summarise(g) for g in grads]
    elements, nonfinite, zeros, sumsq = (tf.add_n(list(column)) for column in zip(*parts))
    if scale is not None:
        sumsq = sumsq / tf.square(scale)
    return elements, nonfinite, zeros, sumsq
