"""Pool workers die with their parent (issue 21 item 7): SIGKILL of the parent (a CI timeout that
kills only the direct child) must not leave workers rewriting files or blocked on a pipe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import DEPRECATED, DEPRECATED_FIXED


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def test_workers_exit_when_the_parent_is_killed(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    for i in range(400):
        (tmp_path / f"m{i}.py").write_text(DEPRECATED * 40)
    env = dict(os.environ, MPFIX_CACHE_DIR=str(tmp_path / ".cache"), NO_COLOR="1")
    parent = subprocess.Popen([sys.executable, "-m", "mpfix", "apply", "--jobs", "2", "."], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and parent.poll() is None:
            workers = [p for p in _children(parent.pid) if _alive(p)]
            if len(workers) >= 2:
                break
            time.sleep(0.05)
        assert len(workers) >= 2, "the pool never started"
        time.sleep(0.5)  # the workers are busy with files now
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(p) for p in workers):
            time.sleep(0.1)
        assert not [p for p in workers if _alive(p)], "workers outlived their parent"
    finally:
        for pid in [parent.pid, *_children(parent.pid), *workers]:  # no orphan left if the test fails
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    # Each file is either untouched or fully fixed: nothing half-written, no temp file left.
    for path in tmp_path.glob("*.py"):
        assert path.read_text() in (DEPRECATED * 40, DEPRECATED_FIXED * 40)
    assert not list(tmp_path.glob(".*mpfix-tmp"))




def test_a_worker_killed_by_a_native_crash_costs_only_its_file(tmp_path: Path):
    """A parse that kills its process (a segfault the pre-check did not foresee) is one file's MP000.

    Run in a fresh interpreter: workers are forked only from a single-threaded process, and the
    test process may have threads left by earlier tests."""
    import json

    for name in ("a.py", "crash.py", "b.py", "c.py"):
        (tmp_path / name).write_text(DEPRECATED)
    script = f"""
import json, os, signal
from pathlib import Path
from mpfix import runner
from mpfix.engine import Options
from mpfix.runner import Job, Mode, process_all

me = os.getpid()
real = runner.process_file

def crashing(path, *args, **kwargs):
    if path.name == "crash.py" and os.getpid() != me:
        os.kill(os.getpid(), signal.SIGSEGV)  # what LibCST's native parser did
    return real(path, *args, **kwargs)

runner.process_file = crashing
files = [Path({str(tmp_path)!r}) / name for name in ("a.py", "crash.py", "b.py", "c.py")]
job = Job(rule_codes=("MP306", "MP307"), options=Options(keras="3"), mode=Mode.CHECK)
results = process_all(files, job, jobs=2, cache=False)
print(json.dumps([[r.path.name, [e.message for e in r.errors], [f.code for f in r.findings]] for r in results]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert [name for name, _, _ in results] == ["a.py", "crash.py", "b.py", "c.py"]
    assert results[1][1] == ["mpfix crashed on this file (signal SIGSEGV); nothing was written; please report it"]
    assert all(codes == ["MP306", "MP307"] for name, _, codes in results if name != "crash.py")


def test_sigterm_ends_a_read_that_blocks_in_the_kernel(tmp_path: Path):
    """A read no boundary follows (a plain open() of a FIFO, which mpfix's reader no longer does):
    the first SIGTERM arms a deadline and the process ends with 143 instead of hanging."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "a.py").write_text(DEPRECATED)
    script = f"""
import sys
from pathlib import Path
from mpfix import runner
from mpfix.engine import Options
from mpfix.runner import Job, Mode, process_all

def blocking(path, limit):
    print("reading", flush=True)
    return open({str(tmp_path / 'pipe')!r}, "rb").read()  # blocks: no writer

runner._read = blocking
runner._STOP_GRACE_S = 2.0
process_all([Path({str(tmp_path / 'a.py')!r})], Job(rule_codes=("MP306",), options=Options(), mode=Mode.CHECK),
            jobs=1, cache=False)
"""
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "reading"
        time.sleep(0.3)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert "did not finish within 2 s" in err and "Traceback" not in err


def test_sigterm_during_a_long_batch_stops_the_pool_without_waiting_for_it(tmp_path: Path):
    """A signal in a pooled run is acted on at once, not when the next batch ends: a batch holding a
    large file (seconds; more on a loaded machine) used up the grace that stopping the workers also
    needs, and the run was forced out ("did not finish within 10 s") instead of stopping cleanly."""
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(DEPRECATED)
    script = f"""
import os
import time
from pathlib import Path
from mpfix import runner
from mpfix.engine import Options
from mpfix.runner import Job, Mode, process_all

def stuck(batch, early=False):
    os.write(1, b"working\\n")  # one write: two workers' print()s could interleave as "workingworking"
    time.sleep(120)  # a batch far longer than the grace; the parent's SIGTERM ends this worker
    return [None] * len(batch)

stuck.__module__, stuck.__qualname__, stuck.__name__ = runner.__name__, "_work", "_work"  # pickled by name
runner._work = stuck  # forked workers inherit it
files = [Path({str(tmp_path)!r}) / name for name in ("a.py", "b.py")]
process_all(files, Job(rule_codes=("MP306",), options=Options(), mode=Mode.CHECK), jobs=2, cache=False)
"""
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "working"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert "mpfix: terminated" in err and "did not finish" not in err and "Traceback" not in err, err
