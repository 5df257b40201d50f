"""Turn 14 fuzz round, configuration: an unknown rule code in a ``[tool.mpfix]`` table is an error that names
the file holding it (as every other bad setting's error does); before, it was "mpfix: error: unknown rule
code(s): MP999" with no file, and with nested configurations the user could not tell which one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SOURCE = "import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f(x):\n    return x\n"


def _check(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpfix", "check", "--no-cache", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_an_unknown_code_in_a_nested_configuration_names_that_file(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.mpfix]\nselect = ['MP3']\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pyproject.toml").write_text("[tool.mpfix]\nignore = ['MP999']\n")
    (tmp_path / "sub" / "a.py").write_text(SOURCE)
    result = _check(tmp_path, ".")
    assert result.returncode == 2
    assert f"{tmp_path / 'sub' / 'pyproject.toml'}: [tool.mpfix] unknown rule code(s): MP999" in result.stderr


def test_an_unknown_code_on_the_command_line_names_no_file(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.mpfix]\nselect = ['MP3']\n")
    (tmp_path / "a.py").write_text(SOURCE)
    result = _check(tmp_path, "--select", "MP999", ".")
    assert result.returncode == 2
    assert "mpfix: error: unknown rule code(s): MP999" in result.stderr
    assert "pyproject.toml" not in result.stderr


def test_the_editor_names_the_file_too(tmp_path: Path):
    from mpfix import api
    from mpfix.config import ConfigError

    (tmp_path / "pyproject.toml").write_text("[tool.mpfix]\nextend-select = ['MP999']\n")
    try:
        api.lint_text(SOURCE, tmp_path / "a.py")
    except ConfigError as exc:
        assert str(exc).startswith(f"{tmp_path / 'pyproject.toml'}: [tool.mpfix] unknown rule code(s): MP999")
    else:
        raise AssertionError("no ConfigError")


def test_an_unknown_code_in_per_file_ignores_names_the_file(tmp_path: Path):
    """A typo in ``per-file-ignores`` (``MP3O6`` for MP306) silently ignored nothing; Ruff rejects it too."""
    (tmp_path / "pyproject.toml").write_text("[tool.mpfix]\nper-file-ignores = {'a.py' = ['MP3O6']}\n")
    (tmp_path / "a.py").write_text(SOURCE)
    result = _check(tmp_path, ".")
    assert result.returncode == 2
    assert f"{tmp_path / 'pyproject.toml'}: [tool.mpfix] unknown rule code(s): MP3O6" in result.stderr
