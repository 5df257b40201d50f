"""The reach scan's per-file inputs kept between runs: each file's entry points and imports (``reachability``);
the callers index's rows the same way (``callers.file_row``, in a file of their own).

The scan reads every file of the project for ``entries_in`` and ``imports_in`` (0.08 of its 0.13 s on tf-models);
both are functions of the file's bytes (and of its name: a conftest, a notebook). One JSON file per project holds
them per file, keyed as ``file_records`` keys its records (size, mtime_ns, ctime_ns, inode; none for a file
changed in the last two seconds; mpfix's code, Python's version, the root): after an edit only the edited files
are read for them, and the scan's join (setters' callers, imports, fixtures) runs as before over the same inputs.
A row that does not decode (a wrong type, an unknown policy) is computed again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from mpfix.project import file_records
from mpfix.project.entries import Entry
from mpfix.project.kinds import Policy


def _entry(row) -> Entry:
    policy, line, what, scope, fixture, autouse, function, in_test = row
    if not (type(line) is int and isinstance(what, str) and isinstance(scope, str) and type(autouse) is bool
            and type(in_test) is bool and all(v is None or isinstance(v, str) for v in (fixture, function))):
        raise ValueError("an entry")
    return Entry(Policy(policy), line, what, scope, fixture, autouse, function, in_test)


def _import(row) -> tuple[int, str, tuple[str, ...]]:
    level, module, names = row
    if not (type(level) is int and isinstance(module, str) and all(isinstance(n, str) for n in names)):
        raise ValueError("an import")
    return level, module, tuple(names)


def _names(row) -> list[str]:
    if not (isinstance(row, list) and all(isinstance(n, str) for n in row)):
        raise ValueError("names")
    return row


class ReachRecords:
    """One project's rows: ``entries``/``imports`` answer from them or compute; ``save`` writes the project's rows."""

    def __init__(self, root: Path, kind: str = "reachfiles") -> None:
        self.folder = file_records.folder()
        self.records = file_records.Records(str(root)) if self.folder is not None else None
        self._name = f"{kind}-{hashlib.blake2b(str(root).encode(), digest_size=8).hexdigest()}.json"
        self._rows: dict[str, dict] = {}
        self._stored: dict = {}
        self._changed = False
        if self.records is not None:
            data = file_records.load_json(self.folder, self._name)
            if isinstance(data, dict) and data.get("base") == self.records.base and isinstance(data.get("files"), dict):
                self._stored = data["files"]

    def _row(self, path: str) -> dict | None:
        if path not in self._rows:
            key = self.records.stat(path) if self.records is not None else None
            stored = self._stored.get(path)
            self._rows[path] = stored if isinstance(stored, dict) and key is not None and stored.get("stat") == key \
                else {"stat": key}
        row = self._rows[path]
        return row if row["stat"] is not None else None

    def _answer(self, path: str, field: str, decode, encode, compute: Callable[[], list]):
        row = self._row(path)
        if row is not None and field in row:
            try:
                return [decode(item) for item in row[field]]
            except (ValueError, TypeError, KeyError):
                pass
        found = compute()
        if row is not None:
            row[field] = [encode(item) for item in found]
            self._changed = True
        return found

    def entries(self, path: str, compute: Callable[[], list[Entry]]) -> list[Entry]:
        """``compute()`` (``entries_in`` of the file as the scan reads it), stored where the file is unchanged."""
        return self._answer(path, "entries", _entry, lambda e: [str(e.policy), e.line, e.what, e.scope, e.fixture,
                                                                e.autouse, e.function, e.in_test], compute)

    def imports(self, path: str, compute: Callable[[], list]) -> list[tuple[int, str, tuple[str, ...]]]:
        """``compute()`` (``imports_in`` of the file's code), stored where the file is unchanged."""
        return self._answer(path, "imports", _import, lambda i: [i[0], i[1], list(i[2])], compute)

    def callers(self, path: str, compute: Callable[[], list[list[str]]]) -> list[list[str]]:
        """``compute()`` (``callers.file_row`` of the file: the names it calls, those it defines), stored where the
        file is unchanged (the callers index's rows: ``ReachRecords(root, "callerfiles")``)."""
        row = self._row(path)
        stored = row.get("callers") if row is not None else None
        if isinstance(stored, list) and len(stored) == 2:
            try:
                return [_names(stored[0]), _names(stored[1])]
            except ValueError:
                pass  # damaged: computed again
        found = compute()
        if row is not None:
            row["callers"] = found
            self._changed = True
        return found

    def save(self) -> None:
        """Write the rows of this scan's files (a deleted file's row goes with it) when one changed."""
        if self.records is None or not (self._changed or set(self._stored) - set(self._rows)):
            return
        rows = {path: row for path, row in self._rows.items() if row["stat"] is not None}
        file_records.save_json(self.folder, self._name, {"base": self.records.base, "files": rows})
