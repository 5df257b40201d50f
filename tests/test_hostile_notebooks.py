"""Malformed notebooks (issue 21 item 5): a clear error for that file, the run goes on, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEPRECATED

CELL = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
NOTEBOOKS = {
    "non_string.ipynb": json.dumps({"cells": [dict(CELL, source=["import tensorflow as tf\n", 5])],
                                    "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode(),
    "deep.ipynb": b'{"cells": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "bad_utf8.ipynb": b'{"cells": [{"cell_type": "code", "source": ["x = \'\xff\'\\n"]}], "nbformat": 4}',
    # json.loads raises ValueError (not JSONDecodeError) past Python's 4,300-digit int limit: an MP000
    # "internal error ... please report it" before.
    "bigint.ipynb": b'{"cells": [], "nbformat": ' + b"9" * 5000 + b"}",
}
EXPECTED = {
    "non_string.ipynb": "non_string.ipynb:1:1: MP000 not a notebook mpfix can read: cell 1's source holds a value of type int",
    "deep.ipynb": "deep.ipynb:1:1: MP000 not a notebook mpfix can read: its JSON is nested too deeply",
    "bad_utf8.ipynb": "bad_utf8.ipynb:1:51: MP000 not a notebook mpfix can read: byte 0xff is not valid UTF-8",
    "bigint.ipynb": "bigint.ipynb:1:1: MP000 not a notebook mpfix can read: its JSON holds a number too long to read",
}


@pytest.mark.parametrize("command", ["check", "apply"])
def test_malformed_notebooks_are_reported_and_the_run_goes_on(tmp_path: Path, command: str):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    for name, data in NOTEBOOKS.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "ok.py").write_text(DEPRECATED)
    env = dict(os.environ, MPFIX_CACHE_DIR=str(tmp_path / ".cache"), NO_COLOR="1")
    for jobs in ("1", "2"):
        result = subprocess.run([sys.executable, "-m", "mpfix", command, "--jobs", jobs, "."], cwd=tmp_path,
                                env=env, capture_output=True, text=True, timeout=120)
        output = result.stdout + result.stderr
        assert result.returncode == 2 and "Traceback" not in output, output
        for expected in EXPECTED.values():
            assert expected in output
        assert "4 files could not be checked" in output and "internal error" not in output
    for name, data in NOTEBOOKS.items():
        assert (tmp_path / name).read_bytes() == data


# JSON may escape half of a UTF-16 pair ("\udce7"): valid JSON, but the cell's text cannot be
# encoded (CPython cannot compile it either). The trigger table's fast path raised a
# UnicodeEncodeError traceback, and the full path an MP000 "internal error ... please report it".
LONE_SURROGATE = json.dumps({"cells": [dict(CELL, source="import tensorflow as tf\n"),
                                       dict(CELL, source=["tf.keras.mixed_precision.experimental.set_policy('x')\n",
                                                          "s = '\udce7'\n"])],
                             "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.parametrize("argv", [["check"], ["check", "--verbose"], ["diff"], ["apply"], ["check", "--format", "sarif"]])
def test_a_lone_surrogate_in_a_code_cell_is_a_clear_error(tmp_path: Path, argv: list[str]):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "lone.ipynb").write_text(LONE_SURROGATE)
    (tmp_path / "ok.py").write_text(DEPRECATED)
    env = dict(os.environ, MPFIX_CACHE_DIR=str(tmp_path / ".cache"), NO_COLOR="1")
    result = subprocess.run([sys.executable, "-m", "mpfix", *argv, "."], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 2 and "Traceback" not in output and "internal error" not in output, output
    if "sarif" not in argv:
        assert ("lone.ipynb:1:1: MP000 not a notebook mpfix can read: cell 2 holds a lone surrogate (\\udce7), "
                "half of a UTF-16 pair, which is not text") in output
        # The rest of the run goes on: ok.py's finding is reported (check), shown (diff) or fixed (apply).
        assert "ok.py" in output or (tmp_path / "ok.py").read_text() != DEPRECATED, output
    assert (tmp_path / "lone.ipynb").read_text() == LONE_SURROGATE
