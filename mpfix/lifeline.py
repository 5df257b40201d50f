"""Worker processes that never outlive the run (issue 21 item 8: SIGKILL of the parent, or a CI
timeout that kills only the direct child, left ``apply`` workers rewriting files for 20 s and
``check`` workers blocked on a pipe 40 minutes later).

``die_with_parent`` asks Linux for SIGTERM when the parent dies (``PR_SET_PDEATHSIG``, through
ctypes); elsewhere, or if that call fails, a watchdog thread polls the parent's pid. A worker that
gets SIGTERM while it waits for work leaves at once; one busy with a file finishes it first (a
write is never cut between its temp file and the rename), as the runner's handler does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _ask_the_kernel(signum: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int, signum: int) -> None:
    import time

    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signum)


def die_with_parent(parent: int, signum: int = signal.SIGTERM) -> None:
    """Get ``signum`` when the process ``parent`` (this one's parent) ends, however it ends."""
    if not _ask_the_kernel(signum):
        threading.Thread(target=_watch, args=(parent, signum), name="mpfix-lifeline", daemon=True).start()
    if os.getppid() != parent:  # it died before the request took effect
        os.kill(os.getpid(), signum)


def run_isolated(function, *args, label: str = "the file"):
    """``function(*args)`` in a forked child; ``(result, None)``, or ``(None, why)`` when the child died
    (a native crash: its death costs this one call, not the run). Linux/fork only: elsewhere the
    call runs in this process."""
    import multiprocessing

    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return function(*args), None
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        send.send(function(*args))

    process = context.Process(target=child, daemon=True)
    process.start()
    send.close()
    try:
        result = receive.recv()
    except EOFError:
        result = None
    process.join()
    if process.exitcode != 0 or result is None:
        code = process.exitcode
        why = (f"mpfix crashed on {label} (signal {signal.Signals(-code).name})" if code is not None and code < 0
               else f"mpfix's worker for {label} exited with status {code}")
        return None, why
    return result, None
