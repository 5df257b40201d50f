"""Tearing down a process pool: every worker stopped, none left behind, no traceback from the executor.

The runner's pools (the per-file workers, the project pass's helpers) end here when a worker died or
the run is interrupted.
"""

from __future__ import annotations

import threading


def stop_workers(executor, grace: float) -> None:
    """Stop every worker: SIGTERM and ``grace`` seconds to unwind, then SIGKILL; no process outlives the run."""
    import multiprocessing
    import time

    quiet_manager_thread_crash()  # before any worker dies: the manager thread reacts at once
    # The executor's own table may already be cleared once it knows it is broken; the
    # processes it started are still our children, so find them there too.
    known = list((getattr(executor, "_processes", None) or {}).values())
    earlier = getattr(executor, "_mpfix_earlier", set())
    ours = [c for c in multiprocessing.active_children() if c.pid not in earlier]
    processes = [p for p in {*known, *ours} if p.is_alive()]
    if grace > 0:
        for process in processes:
            process.terminate()
        deadline = time.monotonic() + grace
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(1.0)
    manager = getattr(executor, "_executor_manager_thread", None)  # shutdown() forgets it
    executor.shutdown(wait=False, cancel_futures=True)
    # The manager thread now closes its wake-up pipe. At exit CPython 3.11's _python_exit
    # writes to every listed manager's pipe without the executor's lock, and a close racing
    # that write printed "OSError: [Errno 9] Bad file descriptor" under Ctrl-C (CI, turn 14:
    # apply --jobs 2). So the manager leaves that list (shutdown() above already woke it; the
    # interpreter still joins it at exit, a non-daemon thread), then is waited for: with no
    # worker left it ends in milliseconds, but a stalled machine may take longer than the wait.
    if manager is not None:
        _forget_at_exit(manager)
        if manager is not threading.current_thread():
            manager.join(MANAGER_JOIN_S)
            if manager.is_alive():
                # Every worker is gone, so the manager can only be stuck reading a result whose
                # worker died while writing it (SIGTERM or SIGKILL between two writes of one
                # message): it waits for the rest forever, as this process holds the pipe's write
                # end too, and the interpreter would wait for it at exit (a hang after Ctrl-C).
                # Closing that end ends its read (end of file); the pool is broken anyway.
                _close_result_writer(manager)
                manager.join(MANAGER_JOIN_S)


MANAGER_JOIN_S = 5.0


def _close_result_writer(manager) -> None:
    """Close this process's write end of the pipe the manager reads results from (shutdown() already
    dropped the executor's reference to it; the manager keeps one)."""
    writer = getattr(getattr(manager, "result_queue", None), "_writer", None)
    if writer is not None:
        try:
            writer.close()
        except OSError:
            pass


def _forget_at_exit(manager) -> None:
    """Take an executor's manager thread out of the table ``_python_exit`` wakes at exit."""
    from concurrent.futures import process

    table = getattr(process, "_threads_wakeups", None)
    if table is not None:
        table.pop(manager, None)


def quiet_manager_thread_crash() -> None:
    """Keep the executor's manager thread from printing a traceback as the pool is torn down.

    Once workers are killed, CPython 3.11's manager thread fails the pending futures and
    raises InvalidStateError on those ``map`` already cancelled (fixed in later versions);
    it is harmless, as the run is stopping, but users would see a traceback.
    """
    from concurrent.futures import InvalidStateError
    from concurrent.futures.process import _ExecutorManagerThread

    previous = threading.excepthook
    if getattr(previous, "_mpfix_quiet", False):
        return

    def hook(args):
        if isinstance(args.thread, _ExecutorManagerThread) and issubclass(args.exc_type, InvalidStateError):
            return
        previous(args)

    hook._mpfix_quiet = True
    threading.excepthook = hook
