"""`.ci/run` fails when the tests fail, and when pytest collects nothing (its exit code 5)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("pytest_exit", "expected"), [(0, 0), (1, 1), (2, 2), (5, 1)])
def test_ci_run_exit_status(tmp_path, pytest_exit, expected):
    # A stand-in `python` records what .ci/run asks of it: pip succeeds, pytest exits as told.
    shim = tmp_path / "python"
    shim.write_text('#!/bin/sh\necho "$@" >> "$CALLS"\n'
                    'if [ "$2" = "pytest" ]; then exit "$PYTEST_EXIT"; fi\nexit 0\n')
    shim.chmod(0o755)
    calls = tmp_path / "calls"
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}", CALLS=str(calls),
               PYTEST_EXIT=str(pytest_exit))
    result = subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == expected, result.stderr
    lines = calls.read_text().splitlines()
    assert lines[0].startswith("-m pip install") and lines[0].endswith('-e .[test]')
    assert lines[1] == "-m pytest"  # everything: no marker expression leaves the slow tests out
    assert ("collected no tests" in result.stderr) == (pytest_exit == 5)
