"""The benchmark scripts still run against today's engine (profile_check.py crashed for a whole turn
after the gate moved, and no test noticed): each on the bundled samples, checked for its own report."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_profile_check_phase_timers_name_every_phase():
    out = _run("benchmarks/profile_check.py", "samples", "--no-profile")
    for phase in ("prefilter", "gate before the parse", "LibCST parse", "rules + analyses"):
        assert re.search(rf"\d+ calls\s+{re.escape(phase)}$", out, re.M), (phase, out)
    gated = re.search(r"the gate left (\d+) of the (\d+) files", out)
    assert gated and int(gated[1]) <= int(gated[2]) and int(gated[2]) > 0, out


def test_profile_check_cprofile_report_splits_time_by_module():
    out = _run("benchmarks/profile_check.py", "samples", "--top", "3")
    assert "self time by module:" in out and "top 3 functions by self time:" in out, out
