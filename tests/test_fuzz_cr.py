"""Turn 14 fuzz round: a file whose lines end in a lone CR (old Mac style). LibCST's parse of a text
ending in "\\r" prints back without that last "\\r" (``parse_module("x = 1\\r").code == "x = 1"``), so
``apply`` dropped the file's final newline along with its fix, every JSON/editor fix carried a second
edit deleting it, and since all fixes then shared that edit each one was validated alone: a 200-fix
CR-only file took over 300 s in ``check --format json`` (5 s with LF)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mpfix.parsing import parse_module

FUNCTION = "@tf.function(experimental_relax_shapes=True)\rdef f{0}(x):\r    return x\r\r\r"
SOURCE = "import tensorflow as tf\r\r\r" + "".join(FUNCTION.format(i) for i in range(3))


def _mpfix(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpfix", *argv, "--no-cache", "a.py"], cwd=cwd, capture_output=True,
                          timeout=600)


def test_the_parse_prints_a_cr_only_text_back_byte_for_byte():
    for text in ("x = 1\r", "x = 1\ry = 2\r", "x = 1\r# c\r", "x = 1\r\r\r", "x = 1\ny = 2\r", "x = 1\r\n", "x = 1"):
        assert parse_module(text).code == text


def test_apply_keeps_the_final_newline_of_a_cr_only_file(tmp_path: Path):
    (tmp_path / "a.py").write_bytes(SOURCE.encode())
    result = _mpfix(tmp_path, "apply")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "a.py").read_bytes() == SOURCE.replace("experimental_relax_shapes", "reduce_retracing").encode()


def test_each_json_fix_of_a_cr_only_file_edits_only_its_own_line(tmp_path: Path):
    (tmp_path / "a.py").write_bytes(SOURCE.encode())
    result = _mpfix(tmp_path, "check", "--format", "json")
    findings = json.loads(result.stdout)
    assert [f["code"] for f in findings] == ["MP306"] * 3
    for finding in findings:
        edits = finding["fix"]["edits"]
        assert [(e["location"]["row"], e["content"]) for e in edits] == [(finding["location"]["row"], "reduce_retracing")]
