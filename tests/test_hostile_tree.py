"""Hostile trees (turn 8 audit): a folder tree deeper than Python's recursion limit, and a folder that
cannot be listed. The walk was recursive (1,500 nested folders: a RecursionError traceback), and a
folder it could not list was skipped without a word, so its files were silently not checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from conftest import DEPRECATED

from mpfix.cli import main
from mpfix.discovery import discover


def test_a_tree_deeper_than_the_recursion_limit_is_walked(tmp_path: Path):
    folder = str(tmp_path)
    for _ in range(1500):  # level by level: pathlib's mkdir(parents=True) recurses too
        folder += "/d"
        os.mkdir(folder)
    Path(folder, "deep.py").write_text(DEPRECATED)
    (tmp_path / "top.py").write_text(DEPRECATED)
    done = subprocess.run([sys.executable, "-m", "mpfix", "check", "--no-cache", "--format", "json", "."],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1
    found = json.loads(done.stdout)
    names = sorted({Path(f["filename"]).name for f in found})
    _remove(Path(folder), tmp_path)  # shutil.rmtree (pytest's clean-up) recurses per level too
    assert names == ["deep.py", "top.py"], [(f["code"], f["message"]) for f in found]


def _remove(deepest: Path, top: Path) -> None:
    for item in deepest.iterdir():
        item.unlink()
    while deepest != top:
        deepest.rmdir()
        deepest = deepest.parent


def test_the_walk_order_is_unchanged(tmp_path: Path):
    """A folder's files first, then its subfolders, each sorted, depth first (as the recursive walk did)."""
    for name in ["b.py", "a/z.py", "a/b/y.py", "a/a.py", "c/x.py", "a/c/w.py"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    found = [p.relative_to(tmp_path).as_posix() for p in discover([tmp_path])]
    assert found == ["b.py", "a/a.py", "a/z.py", "a/b/y.py", "a/c/w.py", "c/x.py"]


def test_a_folder_that_cannot_be_listed_is_an_error_and_the_rest_is_checked(tmp_path: Path, monkeypatch):
    """Run as root the tests cannot take a permission away, so listing ``locked`` is refused here the way
    the kernel refuses it (PermissionError from os.scandir)."""
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "hidden.py").write_text(DEPRECATED)
    (tmp_path / "open.py").write_text(DEPRECATED)
    real = os.scandir

    def scandir(path="."):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "--no-cache", "--jobs", "1", "."])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert "open.py:" in result.output and "MP306" in result.output
    assert "locked:1:1: MP000 cannot list this folder: Permission denied; its files were not checked" in result.output
