"""Child side: a worker of a ``MultiWorkerMirroredStrategy`` cluster leaves only after its peers.

Workers run in lockstep, but they do not *end* together. A worker whose last step function
returned has finished its collectives; a peer may not have: the last all-reduce completes on
one worker as soon as it holds every chunk, while the chunk it sent the peer can still be
queued in its gRPC server. A worker that exits then (verify stops it at ``--steps`` and the
bootstrap exits at once) tears the connection down under the peer, whose collective fails
(``UnavailableError: Socket closed``); and about five seconds after the coordination service's
leader (worker 0) is gone, every peer's collective executor is aborted (TensorFlow 2.21 logs
``BaseCollectiveExecutor::StartAbort UNAVAILABLE: Failed to send RPC to coordination
service``). The peer then ends ``crashed`` although it reached the step limit. Seen once in
CI (2 cores, ``pytest -n auto``) on the launcher test.

So a worker that ended normally (stopped at the step limit, finished, exited 0) writes its
``end`` event, then waits until every peer has written its own ``end`` (or its process is
gone), and only then exits; it records ``left`` (the time, and each peer's state) for the
record. Its watchdog still runs while it waits: a halt request, its deadline or the
parent's death end it as before. The peers are the cluster's chief and workers (``TF_CONFIG``), whose
records lie beside this worker's (``<name>-w<number>.jsonl``, ``cluster_rank``: verify's ``--workers`` and the
workers a launcher starts, ``_follow``).
"""

from __future__ import annotations

import json
import os
import re
import time

# Polling interval while waiting, and the most a worker waits (a backstop: the watchdog's
# halt, deadline and parent checks end a worker whose peer never ends).
POLL_S = 0.05
MAX_WAIT_S = 60.0


def cluster_rank(tf_config: str | None) -> tuple[int, int] | None:
    """(this task's number, the number of tasks) among a cluster's training tasks: the chief first, then
    the workers, as TensorFlow numbers them (``multi_worker_util.id_in_cluster``/``worker_count``: a
    chief is 0 and ``worker`` i is i + the number of chiefs). None for a task that does not train in
    the collective group (an ``evaluator``, a ``ps``) or a ``TF_CONFIG`` that cannot be read.

    Each task's records are named by this number (``-w<number>``): by ``task.index`` alone, a chief
    and worker 0 wrote the same records file."""
    try:
        config = json.loads(tf_config or "")
        cluster, task = config["cluster"], config["task"]
        chiefs, workers = len(cluster.get("chief", ())), len(cluster.get("worker", ()))
        kind, index = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if kind == "chief" and 0 <= index < chiefs:
        return index, chiefs + workers
    if kind == "worker" and 0 <= index < workers:
        return chiefs + index, chiefs + workers
    return None


def peer_records(records: str, worker: int, tf_config: str | None) -> dict[int, str]:
    """The records file of each other training task of the cluster (``cluster_rank``), by number."""
    match = re.fullmatch(rf"(.*)-w{worker}\.jsonl", records)
    rank = cluster_rank(tf_config)
    if match is None or rank is None:
        return {}
    return {i: f"{match.group(1)}-w{i}.jsonl" for i in range(rank[1]) if i != worker}


def _state(path: str) -> str:
    """``ended`` (its end event is written), ``gone`` (no records, or its process is no
    longer running) or ``running``."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return "gone"
    if '"event": "end"' in text:
        return "ended"
    pid = None
    for line in text.splitlines():
        if '"event": "start"' in line:
            try:
                pid = int(json.loads(line).get("pid"))
            except (ValueError, TypeError):
                pid = None
            break
    return "running" if pid is None or _running(pid) else "gone"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    return state not in ("Z", "X")


def wait_for_peers(records: str, worker: int, tf_config: str | None, emit, clock=time.monotonic) -> None:
    """Return once every peer ended (see the module docstring); emit ``left``."""
    peers = peer_records(records, worker, tf_config)
    if not peers:
        return
    started = clock()
    states = {i: _state(p) for i, p in peers.items()}
    while any(s == "running" for s in states.values()) and clock() - started < MAX_WAIT_S:
        time.sleep(POLL_S)
        states = {i: (s if s != "running" else _state(peers[i])) for i, s in states.items()}
    emit({"event": "left", "time": time.time(), "waited_s": round(clock() - started, 3),
          "peers": {str(i): s for i, s in sorted(states.items())}})
