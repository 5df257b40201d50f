"""Tearing down a process pool (``mpfix.pools.stop_workers``) when a worker died half-way through
sending its result: the executor's manager thread must not be left waiting for the rest of it."""

from __future__ import annotations

import multiprocessing
import os
import struct
from concurrent.futures import ProcessPoolExecutor

_PARTIAL: dict = {}


def _die_mid_result() -> None:
    """In a worker: the start of a result message on the executor's result pipe (its length, then a
    few of its bytes), then death, as a worker killed between two writes of one message."""
    os.write(_PARTIAL["fd"], struct.pack("!i", 100_000) + b"partial")
    os._exit(9)


def test_a_worker_that_died_mid_result_leaves_no_manager_thread_waiting(monkeypatch):
    """The manager reads the partial message and waits for the rest, which never comes (this process
    holds the pipe's write end too): the interpreter would wait for it at exit, a hang after Ctrl-C."""
    from mpfix import pools

    monkeypatch.setattr(pools, "MANAGER_JOIN_S", 0.5)
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    writer = pool._result_queue._writer
    _PARTIAL["fd"] = writer.fileno()
    future = pool.submit(_die_mid_result)
    manager = pool._executor_manager_thread
    try:
        for process in list(pool._processes.values()):
            process.join(120)  # it wrote the partial message, then died
        pools.stop_workers(pool, grace=0.0)
        manager.join(120)
        assert not manager.is_alive(), "the manager thread still waits for the rest of the result"
        assert future.done()
    finally:
        if manager.is_alive():  # without the fix: release it, or this test process would hang at exit
            writer.close()
            manager.join(120)
