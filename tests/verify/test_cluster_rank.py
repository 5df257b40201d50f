"""How a followed task is numbered in its cluster (mpfix.verify._peers.cluster_rank), as TensorFlow's
``multi_worker_util.id_in_cluster`` numbers it: the chief is 0, ``worker`` i is i + the number of chiefs."""

from __future__ import annotations

import json

import pytest

from mpfix.verify._peers import cluster_rank, peer_records


def _config(cluster: dict, kind: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})


WORKERS = {"worker": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}
CHIEF = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"], "evaluator": ["127.0.0.1:4"]}


@pytest.mark.parametrize(("cluster", "kind", "index", "rank"), [
    (WORKERS, "worker", 0, (0, 3)),
    (WORKERS, "worker", 2, (2, 3)),
    (CHIEF, "chief", 0, (0, 3)),
    (CHIEF, "worker", 0, (1, 3)),  # not 0: that is the chief's number
    (CHIEF, "worker", 1, (2, 3)),
])
def test_the_chief_comes_first_then_the_workers(cluster, kind, index, rank):
    assert cluster_rank(_config(cluster, kind, index)) == rank


@pytest.mark.parametrize("tf_config", [
    _config(CHIEF, "evaluator", 0),  # not part of the training group: not followed
    _config({"ps": ["127.0.0.1:5"], **WORKERS}, "ps", 0),
    _config(WORKERS, "worker", 3),  # no such task
    _config(WORKERS, "chief", 0),
    '{"cluster": {"worker": []}}', "not json", "", None, '["a list"]',
])
def test_a_task_outside_the_training_group_or_an_unreadable_config_has_no_number(tf_config):
    assert cluster_rank(tf_config) is None


def test_the_chief_and_worker_0_wait_for_each_other_by_their_own_records():
    chief = peer_records("/r/mixed-w0.jsonl", 0, _config(CHIEF, "chief", 0))
    worker = peer_records("/r/mixed-w1.jsonl", 1, _config(CHIEF, "worker", 0))
    assert chief == {1: "/r/mixed-w1.jsonl", 2: "/r/mixed-w2.jsonl"}
    assert worker == {0: "/r/mixed-w0.jsonl", 2: "/r/mixed-w2.jsonl"}
