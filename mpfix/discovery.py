"""Which files to check: the paths given, folders walked, ignores respected."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from mpfix import safe_read

SUFFIXES = (".py", ".ipynb")

# Folders no user wants linted: environments, builds, caches, VCS metadata. Ruff's default
# excludes are all here: without ``.pyenv``, ``mpfix check .`` from a home folder walked every
# installed interpreter's standard library (15,000 files here), for the run and its project facts.
SKIPPED_DIRS = frozenset({
    ".git", ".hg", ".svn", ".bzr", ".git-rewrite", ".tox", ".nox", ".venv", "venv", "env", ".env",
    ".direnv", ".pyenv", "__pypackages__", "__pycache__", "site-packages", "dist-packages", "build", "dist",
    "_build", "buck-out", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".pytype", ".pants.d", ".mpfix_cache",
    "node_modules", ".ipynb_checkpoints", ".eggs", ".vscode",
})


# A glob's ``**`` components are matched by backtracking regexes (pathspec's for ``.gitignore``, ours for
# ``exclude``): each one multiplies the cost by the path's depth, so 8 of them against a 40-folder-deep
# path took 15 s per file (12: hours). Real patterns use one or two; a ``.gitignore`` line with more is
# not used (discovery then checks what it would have skipped), an ``exclude`` glob with more is a
# configuration error (``mpfix.config``).
MAX_GLOBSTARS = 3


def too_many_globstars(pattern: str) -> bool:
    return pattern.count("**") > MAX_GLOBSTARS


# pathspec's regex for a ``.gitignore`` line backtracks on each ``*`` of one path component too: with
# 4 of them, one 250-letter name took 1.2 s; with 7, 27 s for 60 letters (turn 8). Such a line is not
# used either (``exclude`` globs are ours and match in linear time: ``_glob``).
MAX_STARS_PER_COMPONENT = 3


def _too_costly_for_pathspec(line: str) -> bool:
    return too_many_globstars(line) or any(
        component.replace("**", "").count("*") > MAX_STARS_PER_COMPONENT for component in line.split("/"))


def _is_virtualenv(folder: Path) -> bool:
    try:
        return (folder / "pyvenv.cfg").is_file()
    except OSError:  # a folder listed but not searchable (mode r--, /proc/1): not a virtualenv we can tell
        return False


def _bracket(expression: str) -> str:
    """A ``[...]`` expression as a regex matching one character of one path component; ``fnmatch``
    translates it (escaping ``\\``, ``]``, dropping reversed ranges such as ``[z-a]``), so no glob
    makes an invalid regex (``[\\]x]`` raised re.error from the walk, a traceback)."""
    return "(?:(?!/)" + fnmatch.translate(expression)[len("(?s:"):-len(")\\Z")] + ")"


def _pieces(pattern: str) -> list[str]:
    """``pattern`` as tokens: "**/", "**", "*", "/", or one regex matching one character."""
    pieces, i = [], 0
    while i < len(pattern):
        for token in ("**/", "**", "*", "/"):
            if pattern.startswith(token, i):
                pieces.append(token)
                i += len(token)
                break
        else:
            char = pattern[i]
            end = pattern.find("]", i + 2) if char == "[" else -1
            if end > 0:
                pieces.append(_bracket(pattern[i:end + 1]))
                i = end + 1
                continue
            pieces.append("[^/]" if char == "?" else re.escape(char))
            i += 1
    return pieces


@functools.lru_cache(maxsize=256)
def _glob(pattern: str) -> re.Pattern[str]:
    """A glob as a regex where ``*``/``?`` stay within one path component and ``**`` spans folders.

    (``fnmatch``'s ``*`` also matches ``/``: ``test_*.py`` then excluded every
    file under a folder named ``test_something/``.)

    A ``*`` followed by another ``*`` in the same component matches up to the first place where the
    characters between them fit, and keeps it (an atomic group, as ``fnmatch`` does): the earliest
    fit of a fixed-length run is always a right one, and without it ``*a*a*a*a*a*a*b`` took 5 s on one
    60-letter name (each ``*`` multiplied the backtracking by the name's length).
    """
    pieces, out = _pieces(pattern), []
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        if piece == "**/":
            out.append("(?:.*/)?")
        elif piece == "**":
            out.append(".*")
        elif piece == "*":
            j = i + 1
            while j < len(pieces) and pieces[j] not in ("**/", "**", "*", "/"):
                j += 1
            run = "".join(pieces[i + 1:j])
            out.append(f"(?>[^/]*?{run})" if j < len(pieces) and pieces[j] == "*" else f"[^/]*{run}")
            i = j
            continue
        else:
            out.append(piece)
        i += 1
    return re.compile("".join(out))


def _excluded(path: Path, patterns: tuple[str, ...]) -> bool:
    """Whether a glob matches the path's name or any tail of it that starts at a folder boundary."""
    if not patterns:
        return False
    parts = [p for p in path.as_posix().split("/") if p not in ("", ".")]
    tails = ["/".join(parts[i:]) for i in range(len(parts))]
    return any(_glob(pattern.strip("/")).fullmatch(tail) for pattern in patterns for tail in tails)


def is_excluded(path: Path, patterns: tuple[str, ...]) -> bool:
    """Whether an ``exclude`` glob matches ``path`` (a file), as discovery decides it."""
    return _excluded(path, patterns)


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
    """``.gitignore`` files of one git work tree (or of a folder named explicitly), read once each."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self._specs: dict[str, object | None] = {}
        self._chains: dict[str, tuple] = {}

    def _spec(self, folder: str):
        if folder not in self._specs:
            spec = None
            gitignore = os.path.join(folder, ".gitignore")
            if os.path.isfile(gitignore):
                try:
                    lines = [line for line in safe_read.read_text(gitignore, 1 << 20).splitlines()
                             if not _too_costly_for_pathspec(line)]
                    # Imported here: pathspec pulls in asyncio (~25 ms), which
                    # one-file runs (pre-commit passes files, not folders) never need.
                    import pathspec

                    spec = pathspec.GitIgnoreSpec.from_lines(lines)
                except OSError:
                    spec = None
            self._specs[folder] = spec
        return self._specs[folder]

    def _chain(self, folder: str) -> tuple:
        """(prefix length, spec) of every .gitignore from ``folder`` up to the root, once per folder."""
        chain = self._chains.get(folder)
        if chain is None:
            found = []
            current = folder
            while True:
                spec = self._spec(current)
                if spec is not None:
                    found.append((len(current.rstrip(os.sep)) + 1, spec))
                parent = os.path.dirname(current)
                if current == self.root or parent == current:
                    break
                current = parent
            chain = self._chains[folder] = tuple(found)
        return chain

    def ignored(self, path: Path | str, is_dir: bool) -> bool:
        text = str(path)
        suffix = "/" if is_dir else ""
        for start, spec in self._chain(os.path.dirname(text)):
            rel = text[start:].replace(os.sep, "/") + suffix
            if spec.match_file(rel):
                return True
        return False


def _git_root(path: Path) -> Path | None:
    for parent in [path, *path.parents]:
        if os.path.exists(os.path.join(parent, ".git")):
            return parent
    return None


def discover(paths: Iterable[Path], exclude: tuple[str, ...] = (), base: Path | None = None,
             unreadable: list[tuple[Path, str]] | None = None, flat: bool = False) -> Iterator[Path]:
    """Yield the ``.py``/``.ipynb`` files under ``paths``, each once, in a stable order.

    Files named explicitly are always yielded (pre-commit passes exactly the
    files it wants checked), unless an ``exclude`` glob names them. A folder
    named explicitly is walked even when a ``.gitignore`` above it ignores it
    (only the ``.gitignore`` files inside it then apply): the user asked for it.
    ``base``: the folder of the configuration that holds ``exclude``; its globs match a path below it
    as the path below it (Ruff), so a folder above the project (``/home/me/build/proj``) matches no
    ``build/**`` (None: the path as given).
    ``unreadable``: where a folder that cannot be listed (permission denied) is recorded with the
    reason, so the caller can say that its files were not checked (Ruff's E902); None: skipped.
    ``flat``: a folder's own files only, not its subfolders' (a project of loose scripts).
    """
    seen: set[str] = set()
    base = _identity(base) if base is not None else None
    for given in paths:
        given = Path(given)
        if given.is_dir():
            root = _identity(given)
            git_root = _git_root(root)
            ignores = _GitIgnores(git_root) if git_root is not None else None
            if ignores is not None and root != git_root and ignores.ignored(root, is_dir=True):
                ignores = _GitIgnores(root)
            walk = _files_of(given, root, ignores, exclude, base, unreadable) if flat else \
                _walk(given, root, ignores, exclude, base, unreadable)
            for found, key in walk:
                if key not in seen:
                    seen.add(key)
                    yield found
        else:
            key = str(_identity(given))
            if key not in seen and not _excluded(
                    (_below(_identity(given.parent) / given.name, base) if base is not None and exclude else None)
                    or given, exclude):
                seen.add(key)
                yield given


def _below(resolved: Path, base: Path | None) -> Path | None:
    """``resolved`` relative to ``base`` when it lies below it (both real paths), else None."""
    if base is None:
        return None
    try:
        return resolved.relative_to(base)
    except ValueError:
        return None


def _walk(folder: Path, resolved: Path, ignores: _GitIgnores | None, exclude: tuple[str, ...],
          base: Path | None = None, unreadable: list | None = None) -> Iterator[tuple[Path, str]]:
    """(file, its identity) under ``folder``: a folder's files first, then its subfolders, sorted.

    Symlinked folders are not entered (no loops, no files seen twice); a
    symlinked file is yielded (reading it reports a broken link or a loop).
    Identities come from the resolved folder, so only symlinks cost a realpath.
    The walk keeps its own stack: a tree 1,500 folders deep was a RecursionError (turn 8).
    """
    stack = [(folder, resolved)]
    while stack:
        folder, resolved = stack.pop()
        subfolders = yield from _files_of(folder, resolved, ignores, exclude, base, unreadable)
        stack.extend(reversed(subfolders))


def _files_of(folder: Path, resolved: Path, ignores: _GitIgnores | None, exclude: tuple[str, ...],
              base: Path | None, unreadable: list | None):
    """Yield one folder's files; return its subfolders to walk, sorted."""
    try:
        with os.scandir(folder) as scan:
            entries = sorted(scan, key=lambda e: e.name)
    except OSError as exc:
        if unreadable is not None and not isinstance(exc, FileNotFoundError):  # gone meanwhile: nothing to say
            unreadable.append((folder, f"cannot list this folder: {exc.strerror or exc}; its files were not checked"))
        return []
    subfolders = []
    for entry in entries:
        name = entry.name
        try:
            is_dir = entry.is_dir()
            is_link = entry.is_symlink()
        except OSError:
            is_dir, is_link = False, True
        if is_dir:
            if is_link or name in SKIPPED_DIRS or name.endswith(".egg-info"):
                continue
            sub = folder / name
            if _is_virtualenv(sub) or exclude and _excluded(_below(resolved / name, base) or sub, exclude):
                continue
            if ignores is not None and ignores.ignored(os.path.join(resolved, name), is_dir=True):
                continue
            subfolders.append((sub, resolved / name))
        elif name.endswith(SUFFIXES):
            file = folder / name
            if exclude and _excluded(_below(resolved / name, base) or file, exclude):
                continue
            if ignores is not None and ignores.ignored(os.path.join(resolved, name), is_dir=False):
                continue
            yield file, (str(_identity(file)) if is_link else os.path.join(resolved, name))
    return subfolders
