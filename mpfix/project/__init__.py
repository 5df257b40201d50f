"""Where a project starts: the nearest folder with ``pyproject.toml``, a real ``setup.py`` or ``.git``.

With no marker above a file, two questions get two answers:

- *Configuration and declared dependencies* (an upward lookup, ``root_of_folder``): the working
  directory bounds the search when the file lies inside it, as Ruff does for its settings.
- *Project facts* (a downward walk of every file: float16 reach, the cross-file scan, the callers
  index; ``project_root`` and ``walk_paths``): the run's **scope**, what the user asked to check.
  A folder argument is a project walked whole (``mpfix check .`` from an unpacked repository: its
  root); a file argument is a script among its siblings (its folder's own files, not its
  subfolders). The outermost argument holding a file is its project. Walking the working directory
  instead made ``mpfix check tiny`` from ``/tmp`` read every file under ``/tmp`` (turn 8: >100 s
  for 8 files). mypy and pyright read nothing beyond the given files and their imports either; the
  facts here need the files that *import* a file, which only a walk finds, so the walk is bounded
  by the arguments instead.

Kept free of heavy imports: the no-LibCST fast path of ``mpfix check`` asks it too.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Iterable, NamedTuple

from mpfix import safe_read

_SETUP_SCRIPT = re.compile(rb"\b(?:setuptools|distutils)\b")


@functools.lru_cache(maxsize=4096)
def is_project_root(folder: str) -> bool:
    """True if ``folder`` holds ``pyproject.toml``, ``.git`` or a packaging ``setup.py``.

    A module that is merely named ``setup.py`` (DeepLearningExamples keeps runtime helpers that set
    the policy and XLA flags in ``utils/setup.py``) does not start a project: only one that uses
    setuptools or distutils does.
    """
    if os.path.exists(os.path.join(folder, "pyproject.toml")) or os.path.exists(os.path.join(folder, ".git")):
        return True
    setup = os.path.join(folder, "setup.py")
    try:
        head = safe_read.read_bytes(setup, 256 * 1024)
    except OSError:
        return False
    return _SETUP_SCRIPT.search(head) is not None


def root_of_folder(folder: str, cwd: str | None = None) -> str | None:
    """The nearest folder at or above ``folder`` that starts a project, or None.

    With no marker anywhere above (a tarball or `git archive` of a repository), the working
    directory is the project when ``folder`` lies inside it, as Ruff does.
    """
    current = os.path.abspath(folder)
    while True:
        if is_project_root(current):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    cwd = os.path.abspath(os.getcwd() if cwd is None else cwd)
    start = os.path.abspath(folder)
    if start == cwd or start.startswith(cwd.rstrip(os.sep) + os.sep):
        return cwd
    return None


class Scope(NamedTuple):
    """What a run checks, as resolved folders: the folder arguments (each walked whole) and the
    folders of the file arguments (each a flat folder of scripts)."""

    folders: frozenset[str]
    file_folders: frozenset[str]


# None: no run said what it checks (a library caller): the working directory, as ``check .`` would.
_SCOPE: Scope | None = None


def _resolved(path: str | os.PathLike) -> str:
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError, ValueError):  # a symlink loop
        return os.path.abspath(path)


def scope_of(paths: Iterable[str | os.PathLike]) -> Scope:
    folders, file_folders = set(), set()
    for given in paths:
        try:
            is_dir = os.path.isdir(given)
        except (OSError, ValueError):
            is_dir = False
        if is_dir:
            folders.add(_resolved(given))
        else:
            file_folders.add(_resolved(os.path.dirname(os.path.abspath(given))))
    return Scope(frozenset(folders), frozenset(file_folders))


# An editor's workspace folder with no project marker is walked whole only up to this many Python files:
# opened on ``$HOME`` or ``/tmp``, the first lint of a stray script read every file below (>120 s, the
# server answering nothing meanwhile; turn 14 fuzz), and each save read them again.
MAX_WORKSPACE_FILES = 5000


def walkable_workspaces(folders: Iterable[Path], limit: int | None = None) -> list[Path]:
    """The editor's workspace ``folders`` its documents' project facts may walk whole: those that start
    a project, and marker-less ones holding at most ``limit`` Python files (counted by a walk that stops
    there). A document under a larger one is a script among its siblings, as if no folder held it."""
    limit = MAX_WORKSPACE_FILES if limit is None else limit
    kept = []
    for folder in folders:
        if is_project_root(str(folder)) or _at_most(folder, limit):
            kept.append(folder)
    return kept


@functools.lru_cache(maxsize=64)  # asked on every lint; forgotten with the roots (a save)
def _at_most(folder: Path, limit: int) -> bool:
    count = entries = 0
    for _, dirs, files in os.walk(folder, onerror=lambda error: None):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        entries += len(dirs) + len(files)
        count += sum(name.endswith((".py", ".ipynb")) for name in files)
        if count > limit or entries > 50 * limit:
            return False
    return True


def set_scope(scope: Scope | None) -> bool:
    """Bound the project facts of files with no marker above by ``scope`` (``scope_of`` the run's
    paths; None: the working directory). True when it changed: the caller then forgets every
    project's facts (``policy.forget_projects``), which were computed for the old one."""
    global _SCOPE
    if scope == _SCOPE:
        return False
    _SCOPE = scope
    _root_of_folder.cache_clear()
    return True


def current_scope() -> Scope | None:
    """The scope set for this process (a spawned worker is given its parent's)."""
    return _SCOPE


def _inside(folder: str, outer: str) -> bool:
    return folder == outer or folder.startswith(outer.rstrip(os.sep) + os.sep)


def _scope_root(folder: str, cwd: str) -> str:
    """The project of a folder with no marker above: the outermost scope entry holding it, else the
    folder alone (a file outside everything the run named: an editor's stray buffer).

    No scope set (a library caller): the working directory when it holds the folder, as before."""
    if _SCOPE is None:
        return root_of_folder(folder, cwd) or folder
    holding = [entry for entry in (*_SCOPE.folders, *_SCOPE.file_folders) if _inside(folder, entry)]
    return min(holding, key=lambda entry: (len(entry), entry)) if holding else folder


def walk_paths(root: Path) -> tuple[list[Path], list[Path]]:
    """What the project facts of ``root`` (a ``project_root``) read: (folders walked whole,
    folders whose own files only are read).

    A root with a marker, or a folder argument of the run, is walked whole. A root that only holds
    file arguments is those files' folder, flat, plus the arguments below it."""
    text = str(root)
    if _SCOPE is None or text in _SCOPE.folders or is_project_root(text):
        return [root], []
    whole = sorted(Path(f) for f in _SCOPE.folders if _inside(f, text))
    flat = sorted({Path(f) for f in _SCOPE.file_folders if _inside(f, text)} | {root})
    return whole, flat


def project_root(path):
    """The project of ``path`` for its facts: the nearest folder above it that starts a project;
    with none, the run's scope decides (module docstring)."""
    # Keyed by the absolute folder: a relative one ("." for ``train.py``) names another folder
    # once the working directory changes (a test, a long-lived server), and would get its root.
    return _root_of_folder(os.path.abspath(Path(path).parent), os.getcwd())


@functools.lru_cache(maxsize=4096)
def _root_of_folder(folder: str, cwd: str):
    # Per folder, once per process: the engine asks for every file it lints.
    path = Path(folder)
    try:
        path = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        path = path.absolute()
    current = str(path)
    while True:
        if is_project_root(current):
            return Path(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return Path(_scope_root(str(path), cwd))


def forget_roots() -> None:
    """Forget every folder's root (folders were created, markers added)."""
    _root_of_folder.cache_clear()
    is_project_root.cache_clear()
    _at_most.cache_clear()
