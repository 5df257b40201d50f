"""Hostile source given to the static half of ``verify``/``repair`` (and ``mpfix instrument``): no TensorFlow.

Every LibCST parse of user text goes through ``mpfix.parsing.parse_module``, whose depth pre-check
refuses what LibCST's native parser segfaults on (3,000 nested parentheses, an 8,000-long
``a.b.b...`` chain). Each call runs in a child process, so a crash shows as a signal, not as a
dead test session; the child is given a time limit, so a hang shows as a timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Refused by the depth pre-check. LibCST alone segfaults (rc -11) on the first two and parses the
# sum chain for over two minutes (measured on the previous verify code: the test timed out).
HOSTILE = {
    "parentheses": "y = " + "(" * 3000 + "1" + ")" * 3000 + "\n",
    "attribute chain": "import tensorflow as tf\ny = tf" + ".b" * 8000 + "\n",
    "sum chain": "import tensorflow as tf\ny = " + " + ".join(["1"] * 8000) + "\n",
}

PROBE = r"""
import json, sys
from pathlib import Path
from mpfix.verify import islands
from mpfix.verify.changes import static_findings, static_fixed
from mpfix.verify.python_problem import python_problem

text = sys.stdin.read()
good = "import tensorflow as tf\nx = tf.exp(tf.ones([2], tf.float16))\n"
print(json.dumps({
    "island": islands.float32_island(text, 2, 5, "Exp"),
    "layer": islands.layer_float32(text, 2, "Dense"),
    "problem_new": python_problem(Path("train.py"), good, text),
    "problem_original": python_problem(Path("train.py"), text, good),
    "static_findings": len(static_findings(text, Path("train.py"), "mixed_float16")),
    "static_fixed": static_fixed(text, Path("train.py"), ("MP",), None, "mixed_float16"),
}))
"""


def _child(code: str, text: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_repair_edits_and_validation_refuse_hostile_source_without_crashing(name: str):
    done = _child(PROBE, HOSTILE[name])
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    answer = json.loads(done.stdout)
    # No edit is offered on a file that cannot be parsed safely, and nothing is written to it.
    assert answer["island"] is None and answer["layer"] is None
    assert answer["problem_new"].startswith(("it cannot be checked safely", "it does not compile"))
    assert answer["problem_original"].startswith("it cannot be checked safely")
    # repair's static stage (the engine, as in `mpfix apply`): no finding, no fix.
    assert answer["static_findings"] == 0 and answer["static_fixed"] is None


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_instrument_reports_hostile_source_as_path_line_error(tmp_path: Path, name: str):
    script = tmp_path / "train.py"
    script.write_text(HOSTILE[name])
    done = subprocess.run([sys.executable, "-m", "mpfix", "instrument", str(script)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"{script}:") and ": error: cannot instrument:" in line
    # The line number is CPython's, inside the file.
    assert 1 <= int(line[len(str(script)) + 1:].split(":")[0]) <= HOSTILE[name].count("\n")


def test_instrument_refuses_a_fifo_instead_of_blocking(tmp_path: Path):
    fifo = tmp_path / "pipe.py"
    import os

    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "mpfix", "instrument", str(fifo)], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and "cannot read" in done.stderr and "FIFO" in done.stderr


def test_instrument_names_the_line_of_a_syntax_error(tmp_path: Path):
    script = tmp_path / "bad.py"
    script.write_text("import tensorflow as tf\n\ndef (:\n")
    done = subprocess.run([sys.executable, "-m", "mpfix", "instrument", str(script)], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"{script}:3:") and "error: cannot parse" in done.stderr


def test_runtime_finding_columns_survive_a_line_nested_deeper_than_the_stack_allows():
    # A line CPython compiled in the child (at the top of its stack) can still be too deep for
    # ``ast.parse`` in the parent, which raises RecursionError: no column, not a traceback. (In a
    # fresh interpreter: the depth ``ast.parse`` allows depends on the recursion limit.)
    code = ("import sys; from mpfix.verify.evidence import op_column; sys.setrecursionlimit(1000); "
            "print(op_column(sys.stdin.read(), 'AddV2'), op_column('y = a + b', 'AddV2'))")
    done = _child(code, "y = " + " + ".join(["x"] * 8000))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["None", "(5,", "10)"]


MALFORMED_NOTEBOOKS = {
    "deep": '{"cells": ' + "[" * 100000 + "]" * 100000 + "}",
    "types": '{"cells": [{"cell_type": "code", "source": [1, 2]}], "nbformat": 4}',
    "source a dict": '{"cells": [{"cell_type": "code", "source": {"a": 1}}], "nbformat": 4}',
    "a list": "[1, 2]",
}


@pytest.mark.parametrize("name", sorted(MALFORMED_NOTEBOOKS))
def test_verify_refuses_a_malformed_notebook_with_a_path_line_error(tmp_path: Path, name: str):
    # Read as `mpfix check` reads notebooks (mpfix.notebooks.read_notebook), before any TensorFlow
    # starts: before, deeply nested JSON was a RecursionError traceback, a non-string source a
    # TypeError traceback, and a dict source ran as the script `{'a': 1}`.
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text(MALFORMED_NOTEBOOKS[name])
    done = subprocess.run([sys.executable, "-m", "mpfix", "verify", str(notebook), "--steps", "1"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stdout[-1000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"mpfix verify: error: {notebook}:") and "not a notebook" in done.stderr


def test_repair_leaves_a_malformed_notebook_alone():
    from mpfix.verify import repair_notebooks

    for text in MALFORMED_NOTEBOOKS.values():
        assert repair_notebooks.apply(text, lambda source: source + "x = 1\n") is None
        assert repair_notebooks.cells(text) == []


@pytest.mark.parametrize("command", ["verify", "repair"])
def test_a_fifo_or_device_given_as_the_script_is_named_as_such(tmp_path: Path, command: str):
    import os

    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    for name, kind in (("pipe.py", "a FIFO"), ("zero.py", "a device")):
        done = subprocess.run([sys.executable, "-m", "mpfix", command, name], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert f"not a script {command} can run ({kind})" in done.stderr, done.stderr
    done = subprocess.run([sys.executable, "-m", "mpfix", command, "missing.py"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and ("no such script" in done.stderr or "does not exist" in done.stderr)


def test_repairs_working_copy_links_a_fifo_named_like_a_script(tmp_path: Path):
    # A FIFO `data.py` beside the script made the working copy fail (shutil's SpecialFileError): the
    # whole repair stopped with "cannot make the working copy". It is linked like any non-Python file.
    import os

    from mpfix.verify.repair import Workspace

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_text("x = 1\n")
    os.mkfifo(folder / "data.py")
    (tmp_path / "tmp").mkdir()
    workspace = Workspace(folder, tmp_path / "tmp")
    copy = workspace.root
    assert (copy / "train.py").read_text() == "x = 1\n" and not (copy / "train.py").is_symlink()
    assert (copy / "data.py").is_symlink() and os.readlink(copy / "data.py") == str(folder.resolve() / "data.py")
    assert workspace.text(folder / "data.py") is None  # never read


def test_repair_writes_nothing_over_a_file_that_became_a_fifo_or_changed(tmp_path: Path):
    # `write` reads each file again before replacing it: a file replaced by a FIFO meanwhile is an
    # error (it blocked forever before), a changed one is left alone, an unchanged one is written.
    import os

    from mpfix.verify.repair import RepairResult, write

    fifo, changed, fine = tmp_path / "fifo.py", tmp_path / "changed.py", tmp_path / "fine.py"
    os.mkfifo(fifo)
    changed.write_text("x = 2\n")
    fine.write_text("x = 1\n")
    result = RepairResult(fine, None, None, None,
                          texts={path: ("x = 1\n", "x = 3\n") for path in (fifo, changed, fine)})
    errors = write(result)
    assert any(e.startswith(f"{fifo}: cannot read it again") and "FIFO" in e for e in errors), errors
    assert any(e.startswith(f"{changed}: changed while repair ran") for e in errors), errors
    assert result.written == [fine] and fine.read_text() == "x = 3\n" and changed.read_text() == "x = 2\n"
