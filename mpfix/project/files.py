"""The project's files and which of them are test code: one walker and one test-file predicate.

Both project facts (float16 reach, the callers index) walk the project the way ``discover``
does (its skip list: environments, builds, caches), so a file one of them reads is a file the
other reads too.
"""

from __future__ import annotations

import enum
import functools
import os
from pathlib import Path

_TEST_FOLDERS = frozenset({"tests", "test"})


class TestKind(enum.Enum):
    """What a file is to a test runner."""

    __test__ = False  # not a pytest class

    NONE = "none"  # library or script code
    MODULE = "module"  # a module pytest collects or configures: test_*.py, *_test.py, conftest.py
    SUPPORT = "support"  # another module in a tests/test folder (helpers, data makers)


def test_kind(path: str | os.PathLike) -> TestKind:
    """The one test-file predicate: by the file's name, then by a ``tests``/``test`` folder above it."""
    parts = os.path.normpath(str(path)).split(os.sep)
    name = parts[-1]
    if name.startswith("test") or name.endswith("_test.py") or name == "conftest.py":
        return TestKind.MODULE
    if any(part in _TEST_FOLDERS for part in parts[:-1]):
        return TestKind.SUPPORT
    return TestKind.NONE


test_kind.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def is_test_code(path: str | os.PathLike) -> bool:
    """A test module or a module of a tests folder: code that only runs under a test runner."""
    return test_kind(path) is not TestKind.NONE


def path_forms(path: str | os.PathLike) -> tuple[str, ...]:
    """The names under which the project's listing may hold ``path``: as given (absolute), then
    with its folder resolved. The project root is a resolved folder (``project_root``), so a file
    checked through a symlinked folder (``link/proj/lib.py``) is listed as ``real/proj/lib.py``;
    looking it up as given lost its float16 reach (it was "not checked for float16")."""
    given = os.path.abspath(path)
    folder, name = os.path.split(given)
    real = _real_folder(folder)
    if real is None:
        return (given,)
    resolved = os.path.join(real, name)
    return (given,) if resolved == given else (given, resolved)


@functools.lru_cache(maxsize=4096)
def _real_folder(folder: str) -> str | None:
    """``os.path.realpath(folder)`` (None: a symlink loop), once per folder until ``forget_listings``: every
    file's cache key and its engine pass ask ``path_forms`` several times, and realpath costs an lstat per
    path component (43% of ``facts.file_facts``, ~1,650 calls a tf-models run)."""
    try:
        return os.path.realpath(folder)
    except (OSError, RuntimeError, ValueError):  # a symlink loop
        return None


def project_files(root: Path) -> tuple[Path, ...]:
    """Every file discovery finds in the project ``root`` (``.py`` and ``.ipynb``): the whole tree
    for a root with a marker, else what the run's scope bounds (``mpfix.project.walk_paths``).

    Walked on every call; ``listed`` is the memoized listing the project facts share, forgotten with
    them (``facts.forget``), so a test or the editor server that forgets them sees new files.
    """
    return tuple(dict.fromkeys(iter_project_files(root)))


# The listing per root, walked once until the project facts are forgotten (``facts.forget``): a run asked for
# it five times (the reach, the callers index, the cross-file scan twice, its fingerprint), 0.05-0.1 s a walk
# on the bench corpus (2,154 files), all in the parent before the workers start.
_LISTED: dict[Path, tuple[Path, ...]] = {}


def listed(root: Path) -> tuple[Path, ...]:
    """``project_files(root)``, walked once per process until ``forget_listings`` (the reach's scan, which
    walks the project itself each time it runs, leaves its listing here)."""
    found = _LISTED.get(root)
    if found is None:
        found = _LISTED[root] = project_files(root)
    return found


def remember(root: Path, files: tuple[Path, ...]) -> None:
    _LISTED[root] = files


def forget_listings() -> None:
    _LISTED.clear()
    _real_folder.cache_clear()  # a folder may have become (or stopped being) a symlink


def iter_project_files(root: Path):
    """``project_files`` as it is walked (a caller that stops at the first match walks no further);
    a file may come twice."""
    from mpfix.discovery import discover  # local: discovery imports the configuration
    from mpfix.project import walk_paths

    whole, flat = walk_paths(Path(root))
    if flat:
        yield from discover(flat, exclude=(), flat=True)
    yield from discover(whole, exclude=())
