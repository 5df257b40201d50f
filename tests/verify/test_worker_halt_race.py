"""`verify --workers`: a worker whose collective breaks because a halted peer exited,
before its own watchdog saw the halt request, was halted, not crashed (the race that made a
hung group read "worker 1: crashed" on a loaded machine). A real bootstrap child, no
TensorFlow: the script stands in for the broken collective."""

from __future__ import annotations

import time
from pathlib import Path

from mpfix.verify.child import Child
from mpfix.verify.run import Options

# The parent's halt request lands, then the peer's exit breaks this worker's wait.
BROKEN_COLLECTIVE = '''
import sys
config = open("/proc/self/cmdline", "rb").read().split(b"\\0")
halt = config[config.index(b"--config") + 1].decode()[: -len(".json")] + ".halt"
with open(halt, "w") as fh:
    fh.write("hang: no worker recorded a step for 12 s")

def all_reduce():
    raise RuntimeError("Collective ops is aborted by: peer 127.0.0.1 is gone")

all_reduce()
'''


def _run(tmp_path: Path, source: str):
    script = tmp_path / "train.py"
    script.write_text(source, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    child = Child(script, [], "mixed", Options(timeout=60.0), work, False, worker=1)
    while not child.poll():
        time.sleep(0.05)
    return child.result()


def test_an_error_after_the_halt_request_is_the_halts_effect(tmp_path):
    run = _run(tmp_path, BROKEN_COLLECTIVE)
    end = run.end
    assert end["status"] == "halted", end
    assert end["reason"].startswith("hang:")
    assert end["raised"].startswith("RuntimeError: Collective ops is aborted"), end
    assert end["user_frame"]["function"] == "all_reduce" and end["user_frame"]["line"] == 9
    assert run.crash is None


def test_an_error_with_no_halt_request_is_still_a_crash(tmp_path):
    source = BROKEN_COLLECTIVE.replace('with open(halt, "w") as fh:', "if False:")
    run = _run(tmp_path, source)
    assert run.end["status"] == "crashed", run.end
    assert run.crash["type"] == "RuntimeError"
