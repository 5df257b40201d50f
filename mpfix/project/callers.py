"""The callers index: which functions of the project only test code calls (MP205's test helpers).

A factory whose models only tests build (``def build()`` in a library module, called from
``tests/test_lib.py`` and nowhere else) is a test helper: its float16 head is not a training
run's. Whether that holds is a fact about *other* files, so it is computed once per project,
before the per-file run, and travels to each file inside ``ProjectFileFacts`` (and so in its
cache key): review finding F1, a file stayed "clean" after another file began calling it.

Names, not bindings: ``build(`` anywhere counts as a call of every ``def build`` of the project
(a method too), as a reader skimming the project would count it. A definition is not a call; a
call in the defining file is. One regex pass over the bytes of every file (0.19 s for the 11 MB
of the keras package on this machine), so it is done only where float16 can reach the project.
"""

from __future__ import annotations

import functools
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from mpfix import safe_read
from mpfix.project.files import is_test_code
from mpfix.project.call_pattern import CALL

# ``def`` first, its word boundary checked behind it: a literal prefix the regex engine searches for fast (the same
# matches as ``\bdef...``, ~12x faster over the corpora).
_DEF = re.compile(rb"def(?<=\bdef)[ \t]+([A-Za-z_]\w*)")
_MAX_BYTES = 2_000_000  # a generated module this large calls no factory by hand
_BY_TEST, _BY_OTHER = 1, 2


def _read(path: Path) -> bytes:
    try:
        return safe_read.read_bytes(path, _MAX_BYTES)
    except OSError:
        return b""


def file_row(data: bytes) -> list[list[str]]:
    """What the index reads of one file's bytes: [the names it calls more often than it defines them (each
    ``def name(`` matched the call pattern once), the names it defines]."""
    if b"(" not in data:
        return [[], []]
    defs = Counter(_DEF.findall(data)) if b"def" in data else Counter()
    called = [name for name, count in Counter(CALL.findall(data)).items() if count > defs.get(name, 0)]
    return [[n.decode("ascii") for n in called], [n.decode("ascii") for n in defs]]


def test_helpers(files: tuple[Path, ...],
                 rows: Callable[[str, Callable[[], list[list[str]]]], list[list[str]]] | None = None,
                 ) -> dict[str, frozenset[str]]:
    """For each file that is not test code: the functions it defines that the project calls
    only from test code (absolute path -> names; files with none are left out). ``rows(path, compute)``:
    ``file_row`` of the file as kept for it where it is unchanged (``reach_records``), else ``compute()``."""
    callers: dict[str, int] = {}  # name -> _BY_TEST | _BY_OTHER
    defined: dict[str, list[str]] = {}
    for file in files:
        compute = functools.partial(_row_of, file)
        called, defs = rows(str(file), compute) if rows is not None else compute()
        who = _BY_TEST if is_test_code(file) else _BY_OTHER
        for name in called:
            callers[name] = callers.get(name, 0) | who
        if defs and who == _BY_OTHER:
            defined[os.path.abspath(file)] = defs
    helpers = {}
    for file, defs in defined.items():
        names = frozenset(n for n in defs if callers.get(n) == _BY_TEST and not n.startswith("__"))
        if names:
            helpers[file] = names
    return helpers


def _row_of(file: Path) -> list[list[str]]:
    return file_row(_read(file))
