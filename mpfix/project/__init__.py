"""Where a project starts: the nearest folder with ``pyproject.toml``, a real ``setup.py`` or ``.git``
(else the working directory, for files inside it).

Kept free of heavy imports: the no-LibCST fast path of ``mpfix check`` asks it too.
"""

from __future__ import annotations

import functools
import os
import re

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


def project_root(path):
    """Nearest folder above ``path`` that starts a project; its folder if none does."""
    from pathlib import Path

    # Keyed by the absolute folder: a relative one ("." for ``train.py``) names another folder
    # once the working directory changes (a test, a long-lived server), and would get its root.
    return _root_of_folder(os.path.abspath(Path(path).parent), os.getcwd())


@functools.lru_cache(maxsize=4096)
def _root_of_folder(folder: str, cwd: str):
    # Per folder, once per process: the engine asks for every file it lints.
    from pathlib import Path

    path = Path(folder)
    try:
        path = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        path = path.absolute()
    root = root_of_folder(str(path), cwd)
    return path if root is None else Path(root)


def forget_roots() -> None:
    """Forget every folder's root (folders were created, markers added)."""
    _root_of_folder.cache_clear()
    is_project_root.cache_clear()
