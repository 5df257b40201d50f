"""Low items of issue 21: explicit broken links, a repository's own click.py/libcst.py, and the
SyntaxWarnings of the user's code when mpfix compiles a fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import DEPRECATED, DEPRECATED_FIXED


def mpfix(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPFIX_CACHE_DIR=str(cwd / ".cache-for-test"), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "mpfix", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_dangling_or_looping_symlink_named_explicitly_is_an_error(tmp_path: Path):
    (tmp_path / "gone.py").symlink_to(tmp_path / "missing.py")
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    result = mpfix("check", "gone.py", "a.py", cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output  # was 0: "no Python files found"
    assert "gone.py:1:1: MP000 cannot read file: broken symbolic link" in output
    assert "a.py:1:1: MP000 cannot read file: symbolic link loop" in output


def test_python_dash_m_does_not_import_the_repositorys_own_modules(tmp_path: Path):
    marker = tmp_path / "executed"
    for name in ("click", "libcst", "pathspec"):
        (tmp_path / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\nraise SystemExit(99)\n")
    (tmp_path / "model.py").write_text(DEPRECATED)
    result = mpfix("check", "model.py", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MP306" in result.stdout
    assert not marker.exists()


def test_syntax_warnings_of_the_users_code_are_not_shown(tmp_path: Path):
    source = DEPRECATED + "if train_step is 1:\n    pass\n"
    (tmp_path / "model.py").write_text(source)
    for command in (["check", "--format", "json"], ["apply"]):
        result = mpfix(*command, "model.py", cwd=tmp_path)
        assert "SyntaxWarning" not in result.stderr, result.stderr
        assert result.returncode in (0, 1)
    assert (tmp_path / "model.py").read_text() == DEPRECATED_FIXED + "if train_step is 1:\n    pass\n"
