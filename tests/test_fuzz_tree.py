"""Turn 14 fuzz round, the walk: a folder that can be listed but not searched (mode r--, or /proc/1 as any
user) made the virtualenv test's ``stat`` of ``<folder>/pyvenv.cfg`` raise PermissionError out of discovery:
``mpfix check /proc/1`` and an editor whose workspace was ``/`` ended in a traceback. Run as root the tests
cannot take the permission away, so ``stat`` refuses it here the way the kernel does."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from mpfix.cli import main

DEPRECATED = "import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f(x):\n    return x\n"


def test_a_folder_that_cannot_be_searched_is_no_traceback_and_the_rest_is_checked(tmp_path: Path, monkeypatch):
    (tmp_path / "unsearchable").mkdir()
    (tmp_path / "open.py").write_text(DEPRECATED)
    real = os.stat

    def stat(path, *args, **kwargs):
        if Path(path).parent.name == "unsearchable":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "--no-cache", "--jobs", "1", "."])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, result.output
    assert "open.py:4:14: MP306" in result.output


def test_a_large_workspace_folder_without_a_marker_is_not_walked_whole(tmp_path: Path, monkeypatch):
    """An editor opened on ``$HOME`` or ``/tmp``: the first lint of a stray script there walked and read every
    file below the workspace folder (>120 s on this machine's /tmp, the server answering nothing meanwhile).
    A marker-less workspace folder holding more Python files than the bound is left out of the scope, so
    its documents are scripts among their siblings; a small one, or one with a marker, is walked whole."""
    from mpfix import project

    big, small, marked = tmp_path / "home", tmp_path / "unpacked", tmp_path / "repo"
    for folder, count in ((big, 30), (small, 3), (marked, 30)):
        for index in range(count):
            (folder / f"pkg{index % 4}").mkdir(parents=True, exist_ok=True)
            (folder / f"pkg{index % 4}" / f"m{index}.py").write_text("x = 1\n")
    (marked / "pyproject.toml").write_text("[project]\nname = 'r'\n")
    project.forget_roots()
    assert project.walkable_workspaces([big, small, marked], limit=10) == [small, marked]
    monkeypatch.setattr(project, "MAX_WORKSPACE_FILES", 10)
    monkeypatch.chdir(tmp_path)
    before = project.current_scope()
    try:
        project.set_scope(project.scope_of(project.walkable_workspaces([big, small])))
        assert project.project_root(big / "pkg1" / "m1.py") == big / "pkg1"  # its own folder, flat
        assert project.project_root(small / "pkg1" / "m1.py") == small
    finally:
        project.set_scope(before)
        project.forget_roots()


def test_a_working_directory_that_was_removed_is_a_clear_error(tmp_path: Path):
    """``mpfix check /abs/file.py`` from a folder another process removed: ``os.getcwd()`` raises, and
    ``python -m mpfix`` ended in a FileNotFoundError traceback before any command ran."""
    import shlex
    import subprocess
    import sys

    (tmp_path / "a.py").write_text(DEPRECATED)
    gone = tmp_path / "gone"
    gone.mkdir()
    script = (f"cd {shlex.quote(str(gone))} && rmdir {shlex.quote(str(gone))} && "
              f"exec {shlex.quote(sys.executable)} -m mpfix check --no-cache {shlex.quote(str(tmp_path / 'a.py'))}")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 2
    assert "mpfix: error: the working directory cannot be read" in result.stderr
