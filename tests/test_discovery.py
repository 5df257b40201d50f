"""Which files a folder walk yields: ignores, symlinks, odd entries, order, no duplicates."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mpfix.discovery import discover


def _rel(files, base: Path) -> list[str]:
    return [Path(os.path.abspath(f)).relative_to(base).as_posix() for f in files]


def _tree(base: Path, names: list[str]) -> None:
    for name in names:
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")


def test_files_of_a_folder_come_before_its_subfolders_sorted(tmp_path: Path):
    _tree(tmp_path, ["b.py", "a.py", "sub/z.py", "sub/deeper/y.py", "a_sub/c.py", "notes.txt"])
    assert _rel(discover([tmp_path]), tmp_path) == ["a.py", "b.py", "a_sub/c.py", "sub/z.py", "sub/deeper/y.py"]


def test_skipped_folders_and_virtualenvs_are_not_walked(tmp_path: Path):
    _tree(tmp_path, ["keep.py", ".git/hook.py", "__pycache__/x.py", ".mpfix_cache/x.py", "build/gen.py",
                     "myenv/lib/site.py", "pkg.egg-info/x.py"])
    (tmp_path / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    assert _rel(discover([tmp_path]), tmp_path) == ["keep.py"]


def test_gitignore_is_respected_inside_a_repository(tmp_path: Path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("generated/\nsecret_*.py\n")
    _tree(tmp_path, ["src/a.py", "src/generated/g.py", "src/secret_key.py", "src/nested/n.py", "src/nested/skip.py"])
    (tmp_path / "src" / "nested" / ".gitignore").write_text("skip.py\n")
    assert _rel(discover([tmp_path]), tmp_path) == ["src/a.py", "src/nested/n.py"]
    # Walking a subfolder still applies the ignores above it.
    assert _rel(discover([tmp_path / "src"]), tmp_path) == ["src/a.py", "src/nested/n.py"]


def test_a_folder_named_explicitly_is_walked_even_if_ignored_above(tmp_path: Path):
    # The benchmark keeps its corpus in the repository's ignored .bench/ folder:
    # `mpfix check .bench/corpus` must check it, not report 0 files.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/.bench/\n")
    _tree(tmp_path, [".bench/corpus/a.py", ".bench/corpus/inner/b.py", ".bench/corpus/inner/junk.py"])
    (tmp_path / ".bench" / "corpus" / ".gitignore").write_text("junk.py\n")
    assert _rel(discover([tmp_path]), tmp_path) == []
    assert _rel(discover([tmp_path / ".bench" / "corpus"]), tmp_path) == [".bench/corpus/a.py", ".bench/corpus/inner/b.py"]


def test_each_file_is_yielded_once(tmp_path: Path):
    _tree(tmp_path, ["a.py", "sub/b.py"])
    (tmp_path / "link.py").symlink_to(tmp_path / "a.py")
    files = list(discover([tmp_path, tmp_path / "a.py", tmp_path / "sub", tmp_path / "sub" / "b.py"]))
    assert _rel(files, tmp_path) == ["a.py", "sub/b.py"]


def test_symlinked_folders_and_loops_do_not_hang_or_repeat(tmp_path: Path):
    _tree(tmp_path, ["pkg/a.py"])
    (tmp_path / "pkg" / "loop").symlink_to(tmp_path / "pkg")  # pkg/loop/loop/... forever if followed
    (tmp_path / "pkg" / "up").symlink_to(tmp_path)
    (tmp_path / "pkg" / "x.py").symlink_to(tmp_path / "pkg" / "y.py")
    (tmp_path / "pkg" / "y.py").symlink_to(tmp_path / "pkg" / "x.py")  # a file symlink loop
    (tmp_path / "pkg" / "gone.py").symlink_to(tmp_path / "nowhere.py")
    # The loop and the dangling link are yielded (reading them reports what is wrong), once each.
    assert _rel(discover([tmp_path]), tmp_path) == ["pkg/a.py", "pkg/gone.py", "pkg/x.py", "pkg/y.py"]
    assert _rel(discover([tmp_path / "pkg" / "x.py"]), tmp_path) == ["pkg/x.py"]


def test_a_fifo_named_py_is_yielded_not_opened(tmp_path: Path):
    os.mkfifo(tmp_path / "pipe.py")  # opening it for reading would block forever
    assert _rel(discover([tmp_path]), tmp_path) == ["pipe.py"]


def test_exclude_globs_apply_to_walked_and_named_files(tmp_path: Path):
    _tree(tmp_path, ["a.py", "tests/test_a.py", "migrations/0001.py"])
    files = discover([tmp_path, tmp_path / "tests" / "test_a.py"], exclude=("migrations", "test_*.py"))
    assert _rel(files, tmp_path) == ["a.py"]
