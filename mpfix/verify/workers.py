"""Parent side of ``mpfix verify --workers N``: the script as N worker processes of one
``MultiWorkerMirroredStrategy`` cluster on this machine.

Each worker is an ordinary verify child (``child.Child``: its own process group, the
bootstrap's hooks, deadline, parent-death signal) started with ``TF_CONFIG`` as TensorFlow
documents it: ``{"cluster": {"worker": ["127.0.0.1:P0", ...]}, "task": {"type": "worker",
"index": i}}``, on free local ports. Workers run in lockstep (every step ends in
collectives), so they all stop at the same step boundary: each one's hooks stop it after
``--steps`` steps, and under ``--workers`` a non-finite value does not stop a worker early
(its peers would wait for it in their next collective).

The group's life, watched here:

* a worker that fails (raises, exits non-zero, dies) leaves its peers waiting in a
  collective: after PEER_GRACE_S they are halted (the watchdog of each reads its last rows
  and writes where its main thread is, then kills its group);
* no worker records a new step for ``hang_after`` seconds after the first step (or some
  workers ended and the others still run that long): the group hangs; all are halted the
  same way and the run is judged ``timeout`` with each worker's last step and place;
* ``--timeout``, SIGTERM/SIGHUP/SIGKILL to mpfix: as for one child, for every worker.

The float32 baseline runs the same way, after the mixed group (not when the mixed group
hung or timed out). ``workers_judge`` merges the workers' steps and words the verdict.
"""

from __future__ import annotations

import json
import random
import socket
import time
from pathlib import Path

from mpfix.verify.outputs import Outputs
from mpfix.verify.records import RunResult
from mpfix.verify.child import KILL_GRACE_S, PEER_GRACE_S, Child, raise_if_no_gpu
from mpfix.verify.workers_judge import failed, merge

# The parent polls the workers this often.
POLL_S = 0.1


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (all bound at once, then released).

    The workers bind them seconds later, after TensorFlow's import (20-40 s on a loaded machine), and
    meanwhile a port of the kernel's ephemeral range can become the local end of any outgoing
    connection, the workers' own gRPC connections to one another included; the late worker's server
    then cannot start. So the ports come from outside that range (the kernel's own pick, a port of
    the range, only when nothing outside it is free), drawn by a generator no script or test seeds:
    two runs at once must not draw the same ports.
    """
    low, high = _ephemeral_range()
    outside = [port for port in range(_LOWEST_PORT, 65536) if not low <= port <= high]
    draw = random.SystemRandom()
    sockets = []
    try:
        for port in draw.sample(outside, min(len(outside), 64 * count)):
            if len(sockets) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use
                sock.close()
                continue
            sockets.append(sock)
        while len(sockets) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# Below this, ports are left to well-known and registered services.
_LOWEST_PORT = 10_000


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections and ``bind`` to port 0 (Linux; elsewhere the
    IANA range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
            low, high = (int(part) for part in fh.read().split())
        return low, high
    except (OSError, ValueError):
        return 49152, 65535


def tf_config(ports: list[int], index: int) -> str:
    return json.dumps(
        {"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]}, "task": {"type": "worker", "index": index}}
    )


class _Progress:
    """Whether the workers still record steps: their records files growing."""

    def __init__(self, children: list[Child]) -> None:
        self.children = children
        self.sizes: dict[int, int] = {}
        self.stepped = False
        self.last = time.monotonic()

    def update(self, now: float) -> None:
        for child in self.children:
            try:
                size = child.records.stat().st_size
            except OSError:
                continue
            if size != self.sizes.get(child.worker):
                self.sizes[child.worker] = size
                self.last = now
                if not self.stepped:
                    self.stepped = '"event": "step"' in child.records.read_text(encoding="utf-8", errors="replace")


def run_group(script: Path, args, mode: str, options, workdir: Path, origin: Path | None) -> RunResult:
    """Run one group of workers (``mode``: mixed or float32) to its end; the merged run."""
    ports = free_ports(options.workers)
    children: list[Child] = []
    results: dict[int, RunResult] = {}
    order: list[int] = []
    halted: str | None = None
    halted_at = 0.0
    try:
        for index in range(options.workers):
            env = {"TF_CONFIG": tf_config(ports, index)}
            children.append(Child(script, args, mode, options, workdir, False, origin, None, worker=index, env=env))
        progress = _Progress(children)
        first_end = None
        while len(results) < len(children):
            time.sleep(POLL_S)
            now = time.monotonic()
            for child in children:
                if child.worker not in results and child.poll():
                    results[child.worker] = child.result()
                    order.append(child.worker)
                    first_end = first_end or now
                    raise_if_no_gpu(results[child.worker])
            progress.update(now)
            running = [c for c in children if c.worker not in results]
            if not running:
                break
            if halted is None:
                halted = _why_halt(results, order, first_end, progress, now, options)
                if halted is not None:
                    halted_at = now
                    for child in running:
                        child.halt(halted)
            elif now - halted_at > KILL_GRACE_S + 2.0:
                for child in running:  # a worker whose watchdog could not act
                    child.kill()
                    results[child.worker] = child.result()
                    order.append(child.worker)
    finally:
        for child in children:
            if child.worker not in results:
                child.kill()
    runs = [results[i] for i in range(len(children))]
    merged = merge(mode, runs, order)
    merged.halted = halted
    if halted is not None and halted.startswith("hang"):
        merged.timed_out = True
    return merged


def _why_halt(results, order, first_end, progress: _Progress, now: float, options) -> str | None:
    """Why the workers still running must be stopped now (None: they need not)."""
    bad = [w for w in order if failed(results[w])]
    if bad and now - first_end >= PEER_GRACE_S:
        return f"peer failed: worker {bad[0]}"
    if results and not bad and now - first_end >= options.hang_after:
        done = ", ".join(str(w) for w in order)
        return f"hang: worker(s) {done} ended {options.hang_after:g} s ago, the others did not"
    if progress.stepped and now - progress.last >= options.hang_after:
        return f"hang: no worker recorded a step for {options.hang_after:g} s"
    return None


def run_groups(script: Path, args, modes: list[str], options, workdir: Path, origin: Path, outputs: Outputs):
    """The mixed group, then the float32 group (not after a mixed group that hung or timed
    out: None)."""
    runs: list[RunResult | None] = []
    for mode in modes:
        if runs and runs[0] is not None and runs[0].timed_out:
            runs.append(None)
            continue
        runs.append(run_group(script, args, mode, options, workdir, origin))
        outputs.after(mode)
    return runs
