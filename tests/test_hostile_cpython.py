"""Files CPython rejects are reported as CPython says, and never fixed (turn 12 fuzz).

LibCST's parser accepts some texts CPython's rejects: an int literal over 4,300 digits
(``sys.int_max_str_digits``), ``"\\N{NO SUCH NAME}"``. Such a file went on to the rules, and an
analysis's ``literal_eval`` of the literal raised inside mpfix: "MP000 internal error ... please
report it" at 1:1, in the editor too. And ``apply`` wrote fixes into files CPython does not compile
at all (``return`` outside a function, a duplicate parameter): the write did not compile either.
Now the first is ``path:line:col: MP000 SyntaxError: <CPython's message>`` with no rule run, and the
second is left as it was with CPython's message at its line (Ruff fixes no file with a syntax
error); the run goes on with the other files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEPRECATED, DEPRECATED_FIXED

PARSER_REJECTS = {  # name: (tail after DEPRECATED's 9 lines, "line:col: message start")
    "digits.py": ("N = " + "9" * 5000 + "\n", "10:1: MP000 SyntaxError: Exceeds the limit (4300 digits)"),
    "names.py": ('x = "\\N{NO SUCH NAME}"\n', "10:23: MP000 SyntaxError: (unicode error) 'unicodeescape'"),
    "bytes.py": ('x = b"caf\u00e9"\n', "10:5: MP000 SyntaxError: bytes can only contain ASCII literal characters"),
}
COMPILER_REJECTS = {
    "module_return.py": ("return 5\n", "10:1: MP000 SyntaxError: 'return' outside function"),
    "duplicate.py": ("def g(a, a):\n    pass\n", "10:10: MP000 SyntaxError: duplicate argument 'a'"),
    "break.py": ("break\n", "10:1: MP000 SyntaxError: 'break' outside loop"),
}


def _mpfix(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPFIX_CACHE_DIR=str(cwd / ".cache-for-test"), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "mpfix", *args, "--no-cache"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'rejected'\n")
    for name, (tail, _) in {**PARSER_REJECTS, **COMPILER_REJECTS}.items():
        (tmp_path / name).write_text(DEPRECATED + tail)
    (tmp_path / "ok.py").write_text(DEPRECATED)
    return tmp_path


def test_check_reports_what_cpythons_parser_rejects_and_runs_no_rule_there(project: Path):
    result = _mpfix("check", ".", cwd=project)
    output = result.stdout + result.stderr
    assert result.returncode == 2 and "Traceback" not in output and "internal error" not in output, output
    for name, (_, where) in PARSER_REJECTS.items():
        assert f"{name}:{where}" in output, output
        assert f"{name}:4:14: MP306" not in output  # no rule ran on it
    assert "ok.py:4:14: MP306" in output and "module_return.py:4:14: MP306" in output  # the run went on
    findings = json.loads(_mpfix("check", "--format", "json", ".", cwd=project).stdout)
    assert {Path(f["filename"]).name for f in findings if f["code"] == "MP000"} == set(PARSER_REJECTS)


def test_apply_and_diff_write_nothing_into_a_file_cpython_does_not_compile(project: Path):
    diff = _mpfix("diff", ".", cwd=project)
    assert "+++ b/ok.py" in diff.stdout and diff.stdout.count("+++ ") == 1, diff.stdout
    result = _mpfix("apply", ".", cwd=project)
    output = result.stdout + result.stderr
    assert result.returncode == 2 and "Traceback" not in output and "internal error" not in output, output
    for name, (tail, where) in {**PARSER_REJECTS, **COMPILER_REJECTS}.items():
        assert f"{name}:{where}" in output, output
        assert (project / name).read_text() == DEPRECATED + tail, name
    assert f"(Python {sys.version_info.major}.{sys.version_info.minor} does not compile this file; no fix was applied)" \
        in output
    assert (project / "ok.py").read_text() == DEPRECATED_FIXED


def test_the_editor_gets_cpythons_error_not_an_internal_error(tmp_path: Path):
    from mpfix import api

    for name, (tail, where) in PARSER_REJECTS.items():
        result = api.lint_text(DEPRECATED + tail, tmp_path / name)
        assert result.findings == [] and len(result.errors) == 1, (name, result)
        error = result.errors[0]
        line, column, message = where.split(":", 2)
        assert (error.line, error.column) == (int(line), int(column)), (name, error)
        assert error.message.startswith(message.removeprefix(" MP000 ")), (name, error.message)


def test_a_notebooks_top_level_await_still_compiles_and_is_fixed(tmp_path: Path):
    source = DEPRECATED + "result = await tf.function(lambda: 1)()\n"
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
    document = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(document, indent=1) + "\n")  # Jupyter's layout
    result = _mpfix("apply", "nb.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reduce_retracing" in json.loads((tmp_path / "nb.ipynb").read_text())["cells"][0]["source"]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the syntax is valid on this Python")
def test_newer_python_syntax_is_still_checked_but_not_fixed(tmp_path: Path):
    # LibCST parses Python 3.12's `type` statement and generics; this Python does not. The file is the
    # user's valid code for a newer Python: checked as before (not a syntax error), but apply cannot
    # compile what it would write, so it writes nothing and says so.
    text = DEPRECATED + "type Vector = list[float]\n\n\ndef first[T](xs: list[T]) -> T:\n    return xs[0]\n"
    (tmp_path / "new.py").write_text(text)
    check = _mpfix("check", "new.py", cwd=tmp_path)
    assert check.returncode == 1 and "new.py:4:14: MP306" in check.stdout and "MP000" not in check.stdout, check.stdout
    result = _mpfix("apply", "new.py", cwd=tmp_path)
    assert result.returncode == 2 and "new.py:10:6: MP000 SyntaxError: invalid syntax (Python 3." in result.stdout, \
        result.stdout
    assert (tmp_path / "new.py").read_text() == text
