"""Lines as Python counts them (turn 12 fuzz). Python, editors (LSP), ``git apply`` and ``patch`` end a
line at ``\\n``, ``\\r\\n`` or ``\\r`` only; ``str.splitlines()`` also ends one at a form feed (common in
GNU-style code), ``\\x0b``, ``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028``, ``\\u2029``. Findings were counted
Python's way and the rest ``splitlines``' way: after a form feed a JSON ``fix.edits`` row pointed one line
too low (an editor applying it rewrote ``def f(x):``), ``mpfix diff`` printed a patch ``git apply``
refused, ``--format full`` showed the wrong line, and a file without a last newline gave a corrupt patch
(its last line glued to the next one). Each case runs the real command line, as a user or CI would."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEPRECATED, DEPRECATED_FIXED

# One file per way a line can be split inside: each holds its character in a comment or a string
# above the finding, so every finding and edit comes after it.
ODD = {"formfeed": "\x0c", "vtab": "\x0b", "fs": "\x1c", "nel": "\x85", "lsep": "\u2028"}


def _with(char: str) -> str:
    return DEPRECATED.replace("\n\n\n@", f"\n# a {char} b\ns = 'x{char}y'\n\n@", 1)


def _mpfix(*args: str, cwd: Path, text: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPFIX_CACHE_DIR=str(cwd / ".cache-for-test"), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "mpfix", *args, "--no-cache"], cwd=cwd, env=env,
                          capture_output=True, text=text, encoding="utf-8" if text else None, timeout=180)


def _lines(text: str) -> list[str]:
    return io.StringIO(text, newline="").readlines()  # universal newlines: \n, \r\n, \r


def _apply_json_edits(text: str, edits: list[dict]) -> str:
    """Edits applied as an editor applies Ruff's JSON edits: rows are the file's lines, columns characters."""
    starts = [0]
    for line in _lines(text):
        starts.append(starts[-1] + len(line))
    for edit in sorted(edits, key=lambda e: (e["location"]["row"], e["location"]["column"]), reverse=True):
        begin = starts[edit["location"]["row"] - 1] + edit["location"]["column"] - 1
        end = starts[edit["end_location"]["row"] - 1] + edit["end_location"]["column"] - 1
        text = text[:begin] + edit["content"] + text[end:]
    return text


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lines")
    (folder / "pyproject.toml").write_text("[project]\nname = 'lines'\n")
    for name, char in ODD.items():
        (folder / f"{name}.py").write_text(_with(char), encoding="utf-8", newline="")
    (folder / "nofinal.py").write_text(DEPRECATED.rstrip("\n"), newline="")
    (folder / "crlf_formfeed.py").write_text(_with("\x0c").replace("\n", "\r\n"), newline="")
    return folder


def test_json_edits_are_what_apply_writes(project: Path, tmp_path: Path):
    result = _mpfix("check", "--format", "json", ".", cwd=project)
    assert result.returncode == 1, result.stdout + result.stderr
    by_file: dict[str, list[dict]] = {}
    for finding in json.loads(result.stdout):
        assert finding["fix"]["edits"], finding
        edit_rows = {e["location"]["row"] for e in finding["fix"]["edits"]}
        assert edit_rows == {finding["location"]["row"]}, finding  # MP306's edits are on its own line
        by_file.setdefault(Path(finding["filename"]).name, []).extend(finding["fix"]["edits"])
    assert set(by_file) == {f"{name}.py" for name in ODD} | {"nofinal.py", "crlf_formfeed.py"}
    copy = tmp_path / "copy"
    shutil.copytree(project, copy)
    assert _mpfix("apply", ".", cwd=copy).returncode == 0
    for name, edits in by_file.items():
        original = (project / name).read_bytes().decode("utf-8")
        assert _apply_json_edits(original, edits) == (copy / name).read_bytes().decode("utf-8"), name


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_diff_is_a_patch_git_applies_to_what_apply_writes(project: Path, tmp_path: Path):
    diff = _mpfix("diff", ".", cwd=project, text=False)  # bytes: a CRLF file's lines keep their "\r"
    assert diff.returncode == 1, diff.stderr
    assert b"\\ No newline at end of file" in diff.stdout
    patched, applied = tmp_path / "patched", tmp_path / "applied"
    shutil.copytree(project, patched)
    shutil.copytree(project, applied)
    (tmp_path / "fix.patch").write_bytes(diff.stdout)
    git = subprocess.run(["git", "apply", "--unsafe-paths", str(tmp_path / "fix.patch")], cwd=patched,
                         capture_output=True, text=True)
    assert git.returncode == 0, git.stderr
    assert _mpfix("apply", ".", cwd=applied).returncode == 0
    for path in sorted(project.glob("*.py")):
        assert (patched / path.name).read_bytes() == (applied / path.name).read_bytes(), path.name
        assert (patched / path.name).read_bytes() != path.read_bytes(), path.name


def test_full_output_shows_the_findings_own_line(project: Path):
    result = _mpfix("check", "--format", "full", "formfeed.py", "lsep.py", cwd=project)
    shown = [line for line in result.stdout.splitlines() if line.startswith("5 | ")]
    assert shown == ["5 | @tf.function(experimental_relax_shapes=True)"] * 2, result.stdout
    assert "-@tf.function(experimental_relax_shapes=True)" in result.stdout
    assert "+@tf.function(reduce_retracing=True)" in result.stdout


def test_full_output_escapes_control_characters_of_the_source(tmp_path: Path):
    # The finding's own line quotes an escape sequence: shown escaped, never sent to the terminal.
    text = DEPRECATED.replace("(experimental_relax_shapes=True)", "(experimental_relax_shapes=True)  # \x1b[2J\x07", 1)
    (tmp_path / "esc.py").write_text(text)
    result = _mpfix("check", "--format", "full", "esc.py", cwd=tmp_path)
    assert result.returncode == 1 and "\x1b" not in result.stdout and "\x07" not in result.stdout, result.stdout
    assert "# \\x1b[2J\\x07" in result.stdout


def test_a_notebook_cell_after_a_form_feed_keeps_its_line_numbers(tmp_path: Path):
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
             for source in ("import tensorflow as tf\n# page \x0c break\nx = 1\n",
                            "\n\n@tf.function(experimental_relax_shapes=True)\ndef f(x):\n    return x\n")]
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    result = _mpfix("check", "nb.ipynb", cwd=tmp_path)
    assert "nb.ipynb:cell 2:3:14: MP306" in result.stdout, result.stdout + result.stderr


def test_an_undecodable_byte_in_a_cr_only_file_is_placed_on_its_line(tmp_path: Path):
    (tmp_path / "mac.py").write_bytes(DEPRECATED.replace("\n", "\r").encode() + b"name = 'caf\xe9'\r")
    result = _mpfix("check", "mac.py", cwd=tmp_path)
    assert result.returncode == 2 and "mac.py:10:12: MP000 cannot decode as utf-8" in result.stdout, result.stdout


@pytest.mark.parametrize("ending", ["\r", "mixed"])
def test_noqa_counts_lines_as_python_does_in_cr_and_mixed_files(tmp_path: Path, ending: str):
    # tokenize splits only at "\n": a "\r"-ended line ran on into the next, so the `# noqa` of line 4
    # was counted on another line, suppressed nothing (or another line's finding).
    from mpfix import api

    lines = DEPRECATED.replace("(experimental_relax_shapes=True)", "(experimental_relax_shapes=True)  # noqa: MP306",
                               1).splitlines()
    ends = ["\r"] * len(lines) if ending == "\r" else ["\n", "\r", "\r\n"] * len(lines)
    text = "".join(line + end for line, end in zip(lines, ends))
    codes = [(f.code, f.line) for f in api.lint_text(text, tmp_path / "a.py").findings]
    assert codes == [("MP307", 9)], codes  # line 4's MP306 is suppressed, line 9's MP307 is not
