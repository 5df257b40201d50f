"""Hostile configuration (turn 8 audit): a ``pyproject.toml``/``Pipfile`` whose tables have the wrong
TOML type, or whose key names hold control characters, gets one clean ``mpfix: error:`` line (exit 2,
as Ruff does for a configuration it cannot use) or is ignored where it only informs a guess; never a
traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEPRECATED


def _check(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpfix", "check", "--no-cache", *args], cwd=folder,
                          capture_output=True, text=True, timeout=300)


# The settings file itself is unusable: exit 2 and a line naming it.
@pytest.mark.parametrize("pyproject", [
    'tool = 5\n',
    'tool = "mpfix"\n',
    'tool = ["mpfix"]\n',
])
def test_a_tool_entry_that_is_not_a_table_is_a_configuration_error(tmp_path: Path, pyproject: str):
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "a.py").write_text(DEPRECATED)
    done = _check(tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("mpfix: error: ") and "pyproject.toml" in done.stderr
    assert "[tool] must be a table" in done.stderr, done.stderr


# Files read only as evidence of the project's TensorFlow/Keras versions: ignored, the check goes on.
@pytest.mark.parametrize("name,content", [
    ("pyproject.toml", 'project = 5\n'),
    ("pyproject.toml", 'project = "tensorflow"\n'),
    ("pyproject.toml", '[project]\ndependencies = 5\noptional-dependencies = ["x"]\n'),
    ("Pipfile", 'packages = 5\ndev-packages = "x"\n'),
])
def test_dependency_tables_of_the_wrong_type_are_ignored(tmp_path: Path, name: str, content: str):
    (tmp_path / name).write_text(content)
    (tmp_path / "a.py").write_text(DEPRECATED)
    done = _check(tmp_path, "-v")
    assert "Traceback" not in done.stderr and "internal error" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert "MP306" in done.stdout


def test_control_characters_in_a_configuration_error_are_escaped(tmp_path: Path):
    """An unknown key is named in the error; a stranger's key must not drive the terminal or forge a line."""
    (tmp_path / "pyproject.toml").write_text('[tool.mpfix]\n"\\u001b[31mred\\nfake.py:1:1: MP999 x" = 1\n')
    (tmp_path / "a.py").write_text(DEPRECATED)
    done = _check(tmp_path)
    assert done.returncode == 2
    assert "\x1b" not in done.stderr and "\\x1b[31mred\\nfake.py" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_settings_file_too_large_to_read_is_a_configuration_error_not_skipped(tmp_path: Path):
    # Skipped silently, a 3 MB pyproject.toml's [tool.mpfix] (here: ignore MP301) was not used.
    (tmp_path / "pyproject.toml").write_text('[tool.mpfix]\nignore = ["MP3"]\n' + "# pad\n" * 500_000)
    (tmp_path / "a.py").write_text(DEPRECATED)
    done = _check(tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("mpfix: error: ") and "pyproject.toml: cannot be read (over the 2 MiB limit)" in done.stderr
