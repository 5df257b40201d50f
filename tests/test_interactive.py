"""``mpfix apply --interactive``: one coloured diff and one question per fix."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mpfix.cli import cli
from mpfix.findings import Finding, Fix, FixSafety, Position
from mpfix.interactive import Reviewer, coloured_diff

SOURCE = """\
import tensorflow as tf

tf.config.experimental_run_functions_eagerly(True)


@tf.function(experimental_relax_shapes=True)
def train_step(x):
    return x * 2
"""
EAGER_FIXED = SOURCE.replace("experimental_run_functions_eagerly", "run_functions_eagerly")
RELAX_FIXED = SOURCE.replace("experimental_relax_shapes", "reduce_retracing")
BOTH_FIXED = EAGER_FIXED.replace("experimental_relax_shapes", "reduce_retracing")
QUESTION = "Apply this fix? [y]es, [n]o, [a]ll remaining, [q]uit"


def _apply(tmp_path: Path, answers: str | None):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, ["apply", "--interactive", "--no-cache", "train.py"], input=answers,
                                    catch_exceptions=False)
    finally:
        os.chdir(old)
    return result, path.read_text()


def test_yes_then_no(tmp_path):
    result, text = _apply(tmp_path, "y\nn\n")
    assert text == EAGER_FIXED
    assert result.output.count(QUESTION) == 2
    # The first question shows the first fix as a diff of the file.
    first = result.output.split(QUESTION)[0]
    assert "train.py:3:1: MP307" in first
    assert "-tf.config.experimental_run_functions_eagerly(True)\n+tf.config.run_functions_eagerly(True)" in first
    assert "--- a/train.py\n+++ b/train.py" in first
    assert "\x1b[" not in result.output  # not a terminal: no colour codes
    assert result.exit_code == 1  # the declined finding remains
    assert "Fixed 1 finding." in result.output and "1 finding remaining" in result.output


def test_no_then_yes(tmp_path):
    result, text = _apply(tmp_path, "n\ny\n")
    assert text == RELAX_FIXED
    assert "train.py:6:14: MP306" in result.output.split(QUESTION)[1]


def test_all_accepts_the_rest_without_asking(tmp_path):
    result, text = _apply(tmp_path, "a\n")
    assert text == BOTH_FIXED
    assert result.output.count(QUESTION) == 1
    assert result.exit_code == 0


def test_quit_declines_the_rest_without_asking(tmp_path):
    result, text = _apply(tmp_path, "q\n")
    assert text == SOURCE
    assert result.output.count(QUESTION) == 1
    assert result.exit_code == 1


def test_end_of_input_counts_as_quit(tmp_path):
    result, text = _apply(tmp_path, "")
    assert text == SOURCE
    assert result.output.count(QUESTION) == 1


def test_other_answers_are_asked_again(tmp_path):
    result, text = _apply(tmp_path, "maybe\nY\nn\n")
    assert text == EAGER_FIXED
    assert result.output.count(QUESTION) == 3


def test_reviewer_counts_and_remembers_all():
    reviewer = Reviewer()
    finding = Finding("MP306", "msg", "x.py", Position(1, 1), Position(1, 2),
                      fix=Fix(changes={}, safety=FixSafety.SAFE, description="rename"))
    runner = CliRunner()
    with runner.isolation(input="a\n"):
        assert reviewer(finding, "a\n", "b\n") is True
        assert reviewer(finding, "c\n", "d\n") is True  # not asked: stdin is empty now
    assert (reviewer.accepted, reviewer.declined) == (2, 0)


def test_diff_colours():
    diff = coloured_diff("x.py", "a\nb\n", "a\nc\n")
    assert "\x1b[31m-b\x1b[0m" in diff and "\x1b[32m+c\x1b[0m" in diff and "\x1b[36m@@" in diff


def _read_until(fd: int, marker: bytes, timeout: float = 60.0) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    while marker not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out waiting for {marker!r}; got {data!r}")
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
    return data


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_through_a_real_terminal_the_diff_is_coloured(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    main, child = pty.openpty()
    env = dict(os.environ, TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "mpfix", "apply", "-i", "--no-cache", "train.py"],
                            cwd=tmp_path, stdin=child, stdout=child, stderr=child, env=env, close_fds=True)
    os.close(child)
    try:
        first = _read_until(main, b"[q]uit")
        os.write(main, b"y\n")
        second = first + _read_until(main, b"[q]uit", timeout=30)
        os.write(main, b"n\n")
        rest = _read_until(main, b"remaining")
        assert proc.wait(timeout=30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main)
    output = (second + rest).decode("utf-8", "replace")
    assert "\x1b[31m-tf.config.experimental_run_functions_eagerly(True)\x1b[0m" in output
    assert "\x1b[32m+tf.config.run_functions_eagerly(True)\x1b[0m" in output
    assert path.read_text() == EAGER_FIXED
