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

# Slow: imports TensorFlow, inside the tests, so that collecting this file (also with
# -m "not slow") leaves TensorFlow out of sys.modules (tests/rules/test_api_drift.py checks the rules
# never import it).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def channel(tf):
    from mpfix.verify import _channel

    return _channel


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


def _ops_on(channel, graph, op_type: str, variable_name: str) -> list:
    """The ops of type ``op_type`` on the channel variable named ``variable_name`` (by capture)."""
    variables = [*channel._variables(), *(channel._replica_vars or ())]
    names = {internal.op.name: v.name for external, internal in graph.captures
             for v in variables if v.handle is external}
    return [op for op in graph.get_operations()
            if op.type == op_type and names.get(op.inputs[0].op.name, "").startswith(variable_name)]


def test_the_count_is_updated_after_its_row(tf, channel):
    ring = channel.Channel()

    def step():
        grads = tf.random.normal([64, 64])
        values = [tf.constant(1.0)] * (channel.WIDTH - 2 - 1) + [tf.reduce_sum(tf.square(grads))]
        ring.write(0, values, tf.constant(False))
        return 0

    graph = tf.function(step).get_concrete_function().graph
    (row,) = _ops_on(ring, graph, "ResourceScatterNdUpdate", "mpfix_rows")
    (count,) = _ops_on(ring, graph, "AssignVariableOp", "mpfix_state")
    assert row in _ancestors(count)


def test_a_replica_count_is_updated_after_its_row(tf, channel):
    ring = channel.Channel()

    def step():
        values = [tf.reduce_sum(tf.random.normal([8]))] * channel.REPLICA_WIDTH
        ring.write_replica(1, values, tf.constant(True))
        return 0

    graph = tf.function(step).get_concrete_function().graph
    (row,) = _ops_on(ring, graph, "ResourceScatterNdUpdate", "mpfix_replica_rows")
    counts = _ops_on(ring, graph, "ResourceScatterNdAdd", "mpfix_replica_counts")
    alarms = _ops_on(ring, graph, "ResourceScatterNdAdd", "mpfix_state")
    assert counts and alarms
    assert all(row in _ancestors(op) for op in counts + alarms)
