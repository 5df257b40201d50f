"""A measured row is written before the count that publishes it (real TensorFlow, traced graphs).

The watchdog thread reads the channel's count, then its rows, while the script's step still runs
(``_bootstrap._Watchdog``). In a graph nothing orders updates of two different variables, and the
count waits only on the loss while the row waits on the gradients' sums, so the count could be
updated first: the reader then took a row of zeros as the step's and marked it read. A Keras 3
script whose loss was NaN from step 0 verified "healthy, 1 steps" in 2 of 4 runs (turn 10's
held-out ``gem_pool_k3.py``); with the order below, 6 of 6 runs said non-finite at step 0.
"""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from mpfix.verify import _channel  # noqa: E402  (imports TensorFlow)

pytestmark = pytest.mark.slow


def _ancestors(op) -> set:
    """Every op ``op`` waits for, through data and control inputs."""
    seen, todo = set(), [op]
    while todo:
        current = todo.pop()
        for parent in [t.op for t in current.inputs] + list(current.control_inputs):
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


def _traced(fn):
    return tf.function(fn).get_concrete_function().graph


def _captured_names(graph) -> dict:
    """Placeholder name -> variable name for the variables the function graph captured."""
    out = {}
    for external, internal in graph.captures:
        for variable in (_channel_variables()):
            if variable.handle is external:
                out[internal.op.name] = variable.name
    return out


_CHANNEL = _channel.Channel()


def _channel_variables():
    rows, state, pending = _CHANNEL._variables()
    extra = list(_CHANNEL._replica_vars or ())
    return [rows, state, pending, *extra]


def _ops_on(graph, op_type: str, variable_name: str) -> list:
    names = _captured_names(graph)
    return [op for op in graph.get_operations()
            if op.type == op_type and names.get(op.inputs[0].op.name, "").startswith(variable_name)]


def test_the_count_is_updated_after_its_row():
    def step():
        grads = tf.random.normal([64, 64])
        values = [tf.constant(1.0)] * (_channel.WIDTH - 2 - 1) + [tf.reduce_sum(tf.square(grads))]
        _CHANNEL.write(0, values, tf.constant(False))
        return 0

    graph = _traced(step)
    (row,) = _ops_on(graph, "ResourceScatterNdUpdate", "mpfix_rows")
    (count,) = _ops_on(graph, "AssignVariableOp", "mpfix_state")
    assert row in _ancestors(count)


def test_a_replica_count_is_updated_after_its_row():
    def step():
        values = [tf.reduce_sum(tf.random.normal([8]))] * _channel.REPLICA_WIDTH
        _CHANNEL.write_replica(1, values, tf.constant(True))
        return 0

    graph = _traced(step)
    (row,) = _ops_on(graph, "ResourceScatterNdUpdate", "mpfix_replica_rows")
    counts = _ops_on(graph, "ResourceScatterNdAdd", "mpfix_replica_counts")
    alarms = _ops_on(graph, "ResourceScatterNdAdd", "mpfix_state")
    assert counts and alarms
    assert all(row in _ancestors(op) for op in counts + alarms)
