"""Which files to check: the paths given, folders walked, ignores respected."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

SUFFIXES = (".py", ".ipynb")

# Folders no user wants linted: environments, builds, caches, VCS metadata.
SKIPPED_DIRS = frozenset({
    ".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", "env", ".env",
    "__pycache__", "site-packages", "dist-packages", "build", "dist",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".mpfix_cache", "node_modules",
    ".ipynb_checkpoints", ".eggs",
})


def _is_virtualenv(folder: Path) -> bool:
    return (folder / "pyvenv.cfg").is_file()


def _excluded(path: Path, patterns: tuple[str, ...]) -> bool:
    text = path.as_posix()
    return any(
        fnmatch.fnmatch(text, pattern) or fnmatch.fnmatch(path.name, pattern) or fnmatch.fnmatch(text, f"*/{pattern}")
        for pattern in patterns
    )


def _identity(path: Path) -> Path:
    """The real path, for de-duplication; the absolute path when it cannot be resolved.

    A symlink loop makes ``Path.resolve`` raise RuntimeError (Python < 3.13):
    such a file is still yielded once, and reading it reports the loop.
    """
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


class _GitIgnores:
    """``.gitignore`` files of one git work tree, read once each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._specs: dict[Path, object | None] = {}

    def _spec(self, folder: Path):
        if folder not in self._specs:
            spec = None
            gitignore = folder / ".gitignore"
            if gitignore.is_file():
                try:
                    lines = gitignore.read_text(encoding="utf-8", errors="replace").splitlines()
                    # Imported here: pathspec pulls in asyncio (~25 ms), which
                    # one-file runs (pre-commit passes files, not folders) never need.
                    import pathspec

                    spec = pathspec.PathSpec.from_lines("gitwildmatch", lines)
                except OSError:
                    spec = None
            self._specs[folder] = spec
        return self._specs[folder]

    def ignored(self, path: Path, is_dir: bool) -> bool:
        folder = path.parent
        while True:
            spec = self._spec(folder)
            if spec is not None:
                rel = path.relative_to(folder).as_posix() + ("/" if is_dir else "")
                if spec.match_file(rel):
                    return True
            if folder == self.root or folder.parent == folder:
                return False
            folder = folder.parent


def _git_root(path: Path) -> Path | None:
    for parent in [path, *path.parents]:
        if (parent / ".git").exists():
            return parent
    return None


def discover(paths: Iterable[Path], exclude: tuple[str, ...] = ()) -> Iterator[Path]:
    """Yield the ``.py``/``.ipynb`` files under ``paths``, each once, in a stable order.

    Files named explicitly are always yielded (pre-commit passes exactly the
    files it wants checked), unless an ``exclude`` glob names them.
    """
    seen: set[Path] = set()
    for given in paths:
        given = Path(given)
        if given.is_dir():
            root = _identity(given)
            git_root = _git_root(root)
            ignores = _GitIgnores(git_root) if git_root is not None else None
            for found in _walk(given, root, ignores, exclude):
                key = _identity(found)
                if key not in seen:
                    seen.add(key)
                    yield found
        else:
            key = _identity(given)
            if key not in seen and not _excluded(given, exclude):
                seen.add(key)
                yield given


def _walk(folder: Path, resolved: Path, ignores: _GitIgnores | None, exclude: tuple[str, ...]) -> Iterator[Path]:
    # os.walk(followlinks=False) cannot loop on symlinked folders.
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        current = Path(dirpath)
        current_resolved = resolved / current.relative_to(folder)
        kept = []
        for name in sorted(dirnames):
            sub = current / name
            if name in SKIPPED_DIRS or name.endswith(".egg-info") or _is_virtualenv(sub):
                continue
            if _excluded(sub, exclude):
                continue
            if ignores is not None and ignores.ignored(current_resolved / name, is_dir=True):
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            if not name.endswith(SUFFIXES):
                continue
            file = current / name
            if _excluded(file, exclude):
                continue
            if ignores is not None and ignores.ignored(current_resolved / name, is_dir=False):
                continue
            yield file
