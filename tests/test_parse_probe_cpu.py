"""The parse probe's limit is CPU time of the parsing process, so machine load does not change a file's report.

Before, it was wall time: on a loaded machine (CI's two cores) a rejected file whose LibCST parse needs
20 ms could wait past the limit for a core and read "did not finish" instead of LibCST's syntax error.
A stopped process stands in for one starved of CPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from mpfix import parse_probe

pytestmark = pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/stat"), reason="CPU time read from /proc")


def _spin_until(condition, seconds: float = 60.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_cpu_seconds_grows_with_work_and_not_with_waiting():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert _spin_until(lambda: (parse_probe.cpu_seconds(busy.pid) or 0) >= 0.3)
        waited = parse_probe.cpu_seconds(idle.pid)
        time.sleep(0.5)
        assert parse_probe.cpu_seconds(idle.pid) - waited < 0.1
    finally:
        for process in (busy, idle):
            process.kill()
            process.wait()
    assert parse_probe.cpu_seconds(busy.pid) is None  # reaped: nothing to read


def test_a_limit_passes_on_the_processs_cpu_time_not_on_the_clock():
    stopped = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.kill(stopped.pid, signal.SIGSTOP)  # no CPU at all, as a process that never gets a core
        limit = parse_probe.Limit(stopped.pid, 0.2)
        time.sleep(0.6)
        assert not limit.passed()  # three times the limit on the clock, no CPU spent
        os.kill(stopped.pid, signal.SIGCONT)
        assert _spin_until(limit.passed)  # it runs: its CPU time reaches the limit
    finally:
        stopped.kill()
        stopped.wait()


def test_a_limit_on_a_process_it_cannot_read_is_wall_time():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    limit = parse_probe.Limit(gone.pid, 0.2)
    assert not limit.passed()
    assert _spin_until(limit.passed, seconds=5.0)


def test_a_parse_held_off_the_cpu_past_its_limit_still_gives_libcsts_error():
    """The reused helper (the path where other threads run) is stopped while a small rejected text
    waits for it, three times longer than the limit. It read "did not end" before; now the helper's
    CPU time decides, and LibCST's own error comes back once it runs."""
    keep = threading.Event()
    thread = threading.Thread(target=keep.wait, daemon=True)  # as the editor server's threads: no fork
    thread.start()
    try:
        assert parse_probe.probe("x = 1\n", 60.0) is None  # started and ready
        pid = parse_probe.helper_pid()
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(1.5, os.kill, (pid, signal.SIGCONT)).start()
        seen = parse_probe.probe("x = [1,\ndef f(:\n    pass\n", 0.5)
        assert isinstance(seen, tuple) and seen[1] == 3, seen
        assert parse_probe.helper_pid() == pid  # the same helper answered: it was not killed as overrun
    finally:
        keep.set()
        parse_probe._HELPER.stop()
