"""Per-file records of the cross-file scan, kept in the project store between runs (``mpfix.project.store``).

The project's stored facts rest on every file's size and mtime, so one edit anywhere used to re-read and re-parse
every file float16 reaches (449 ``ast`` parses on tf-models, ~0.75 s of the 1.2 s an edit cost a warm one-file
check). What the scan reads of ONE file is a function of that file and of little else; it is kept per file, keyed
by the file's (size, mtime_ns, ctime_ns, inode), the path, the project root, mpfix's code and Python's version
(none for a file changed in the last two seconds, which may change again unseen within one timestamp tick):

- ``facts``: the byte facts ``CrossCallScan.run`` takes of every file (class names, a top-level class, called
  names);
- ``summary``: ``crosscall_summary.summarise``'s answer per (module, ``sites``, gather-the-plain-sites), with the
  project-module names it asked ``is_project_module`` about and the answers, checked again against the project's
  modules now (a new or deleted file changes them).

After an edit only the edited files miss; the scan's join over the summaries runs as before, so its answer is the
one a run without a store computes. A record that cannot be read, does not parse, or holds a value of the wrong
type is a miss (``summary_json``/``ast_json`` check every value): a damaged or hostile store costs time only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from mpfix import safe_read
from mpfix.project import crosscall_summary, store, summary_json
from mpfix.project.call_pattern import CLASS_NAME, top_class
from mpfix.project.crosscall_records import CallContext
from mpfix.project.crosscall_summary import FileSummary

MISS = object()
_LIMIT = 16 << 20
_BAD = (ValueError, TypeError, KeyError, AttributeError, RecursionError, IndexError)


class Records:
    """The records of one project's scan: read on first use, written (the new and changed ones) by ``save``."""

    def __init__(self, root: str) -> None:
        self.folder = folder()
        self.root = root
        self.base = ""  # mpfix's version and code, Python's version, the root: what every record rests on
        self._stat: dict[str, list[int] | None] = {}
        self._records: dict[str, dict | None] = {}
        self._dirty: set[str] = set()
        self._read_facts: dict[str, tuple[list[str], bool]] = {}  # read by ``byte_facts``, kept by ``keep_facts``
        if self.folder is not None:
            from mpfix import __version__
            from mpfix.cache_folder import code_fingerprint

            self.base = hashlib.blake2b(repr((__version__, sys.version, root, code_fingerprint())).encode(),
                                         digest_size=16).hexdigest()

    @property
    def active(self) -> bool:
        return self.folder is not None

    def _name(self, path: str) -> str:
        digest = hashlib.blake2b(f"{self.root}\0{path}".encode("utf-8", "surrogateescape"), digest_size=12)
        return f"file-{digest.hexdigest()}.json"

    def _key(self, path: str) -> list | None:
        """What the record of ``path`` rests on; None: not statable (no record)."""
        stat = self.stat(path)
        return None if stat is None else [self.base, path, *stat]

    def stat(self, path: str) -> list[int] | None:
        """(size, mtime_ns, ctime_ns, inode) of ``path``, taken once, before the file is read (so a record never
        holds text older than its key says); None: not statable, or changed too recently to be trusted."""
        if path not in self._stat:
            try:
                st = os.stat(path)
                # A file changed just now may change again within the same timestamp tick with the same size (git's
                # "racily clean" entries): no record for it this time.
                self._stat[path] = None if store.racy(st) else [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
            except (OSError, ValueError):
                self._stat[path] = None
        return self._stat[path]

    def _record(self, path: str) -> dict | None:
        """The stored record of ``path`` for its current key (created empty where none matches)."""
        if path in self._records:
            return self._records[path]
        key = self._key(path) if self.folder is not None else None
        record = None
        if key is not None:
            data = load_json(self.folder, self._name(path))
            if isinstance(data, dict) and data.get("key") == key and isinstance(data.get("summaries"), dict):
                record = data
            else:
                record = {"key": key, "summaries": {}}
        self._records[path] = record
        return record

    # -- the byte facts ---------------------------------------------------------------------
    def facts(self, path: str) -> tuple[list[str], bool, frozenset[str]] | None:
        """(class names, a top-level class, called names) stored for ``path``; None: compute them."""
        record = self._record(path)
        found = record.get("facts") if record is not None else None
        try:
            names, top, called = found
            if isinstance(top, bool) and isinstance(names, list) and isinstance(called, list) and \
                    all(isinstance(n, str) for n in [*names, *called]):
                return list(names), top, frozenset(called)
        except _BAD:
            pass
        return None

    def byte_facts(self, path: str, read: Callable[[str], bytes | None]):
        """(class names, a top-level class, called names, None) stored for ``path``, else (class names, a top-level
        class, None, its bytes) read now (``CrossCallScan.run`` finds its called names); None: unreadable."""
        stored = self.facts(path)
        if stored is not None:
            return (*stored, None)
        data = read(path)
        if data is None:
            return None
        names, top = self._read_facts[path] = [n.decode("ascii", "replace") for n in CLASS_NAME.findall(data)], \
            top_class(data)
        return names, top, None, data

    def keep_facts(self, called: dict[str, frozenset[str]]) -> None:
        """Keep the byte facts of the files ``byte_facts`` read, with their ``called`` names."""
        for path, (names, top) in self._read_facts.items():
            record = self._record(path)
            if record is not None and path in called:
                record["facts"] = [names, top, sorted(called[path])]
                self._dirty.add(path)
        self._read_facts.clear()

    # -- the summaries ---------------------------------------------------------------------
    @staticmethod
    def _variant(module: str, sites: bool, gather: bool) -> str:
        return json.dumps([module, sites, gather])

    def summary(self, path: str, module: str, sites: bool, gather: bool,
                is_project_module: Callable[[str], bool]):
        """The stored ``summarise`` answer (a FileSummary, or None: the file does not parse); MISS: compute it."""
        record = self._record(path)
        entry = record["summaries"].get(self._variant(module, sites, gather)) if record is not None else None
        try:
            asked, found = entry["modules"], entry["summary"]
            if not all(isinstance(a, bool) and is_project_module(name) is a for name, a in asked.items()):
                return MISS  # a project module appeared or went away: its answers may differ
            summary = None if found is None else summary_json.decode(found)
        except _BAD:
            return MISS
        if summary is not None and (summary.path, summary.module) != (path, module):
            return MISS  # another file's: never read a path the project did not list
        dtypes = record.get("class_dtypes")  # ``class_dtypes.class_dtypes`` of the same text, where it was asked
        if summary is not None and isinstance(dtypes, dict) and all(
                isinstance(v, list) and len(v) == 2 and all(type(b) is bool for b in v) for v in dtypes.values()):
            summary.class_dtypes = {name: (v[0], v[1]) for name, v in dtypes.items()}
        return summary

    def keep_summary(self, path: str, module: str, sites: bool, gather: bool, asked: dict[str, bool],
                     summary: FileSummary | None) -> None:
        """Keep ``summarise``'s answer (``gather``: what its ``plain`` answered). Gathered module functions' sites are
        kept apart, as ``plain_sites``' answer (the one the scan computes for a summary that did not gather them):
        most are never walked, and are then never decoded."""
        record = self._record(path)
        if record is None:
            return
        try:
            encoded = None if summary is None else summary_json.encode(summary, plain=False)
            plain = _text(summary_json.encode_sites(summary.plain_sites)) if summary and summary.plain_collected \
                else None
        except (ValueError, RecursionError):
            return  # no JSON form (a deep expression): summarised again next time
        record["summaries"][self._variant(module, sites, gather)] = {"modules": asked, "summary": encoded}
        memos = record.setdefault("memo", {})
        if plain is not None and isinstance(memos, dict):
            memos[json.dumps(["plain", module])] = {"modules": asked, "sites": plain}
        self._dirty.add(path)

    def summarise(self, path: str, module: str, sites: bool, called: frozenset[str] | None, class_names: set[str],
                  is_project_module: Callable[[str], bool], read: Callable[[], bytes | None]) -> FileSummary | None:
        """``summarise(path, read(), module, is_project_module, sites, plain=class_names.__and__, called)``, stored
        where it was kept for the file as it is now; ``read`` only on a miss."""
        keep = self.active and (called is not None or not sites)  # else ``summarise`` decides the variant
        gather = sites and bool(class_names & called) if keep else False  # what ``plain`` answers
        found = self.summary(path, module, sites, gather, is_project_module) if keep else MISS
        if found is not MISS:
            return found
        data = read()
        if data is None:
            return None
        ask, asked = recording(is_project_module)
        found = crosscall_summary.summarise(path, data, module, ask, sites=sites, plain=class_names.__and__, called=called)
        if keep:
            self.keep_summary(path, module, sites, gather, asked, found)
        return found

    # -- what the scan's join parses a file again for -----------------------------------------------
    def _sites(self, path: str, memo: list, compute: Callable[[Callable[[str], bool]], list | None],
               is_project_module: Callable[[str], bool]) -> list | None:
        """Sites a later pass collects from a file's text (``compute``, given ``is_project_module``), stored under
        ``memo`` with the project-module questions they rest on."""
        record = self._record(path) if self.active else None
        key = json.dumps(memo)
        try:
            entry = record["memo"][key]
            if all(isinstance(a, bool) and is_project_module(name) is a for name, a in entry["modules"].items()):
                found = entry["sites"]
                return None if found is None else summary_json.decode_sites(json.loads(_str(found)))
        except _BAD:
            pass
        ask, asked = recording(is_project_module)
        found = compute(ask)
        if record is not None:
            try:
                encoded = None if found is None else _text(summary_json.encode_sites(found))
                memos = record.setdefault("memo", {})
                (memos if isinstance(memos, dict) else {})[key] = {"modules": asked, "sites": encoded}
                self._dirty.add(path)
            except (ValueError, RecursionError):
                pass
        return found

    def plain_sites(self, file: FileSummary, read: Callable[[str], bytes | None],
                    is_project_module: Callable[[str], bool]) -> list:
        """``crosscall_summary.plain_sites`` of the file (``read``: its bytes, on a miss)."""
        def compute(ask):
            data = read(file.path)
            return crosscall_summary.plain_sites(file, data, ask) if data is not None else []
        return self._sites(file.path, ["plain", file.module], compute, is_project_module)

    def helper_sites(self, callee: FileSummary, name: str, params: frozenset[str], read: Callable[[str], bytes | None],
                     is_project_module: Callable[[str], bool], nodes: dict[str, dict]) -> list | None:
        """The sites of module function ``name`` of ``callee`` as a helper with float16 ``params``; None: no such
        function. ``nodes``: the functions of each file parsed (once) on a miss."""
        def compute(ask):
            if callee.path not in nodes:
                data = read(callee.path)
                nodes[callee.path] = crosscall_summary.function_nodes(data) if data is not None else {}
            func = nodes[callee.path].get(name)
            return None if func is None else crosscall_summary._Collector(callee, ask).collect(
                func, CallContext.HELPER, name, params)
        return self._sites(callee.path, ["helper", callee.module, name, sorted(params)], compute, is_project_module)

    def save(self, summaries: dict[str, FileSummary | None] | None = None) -> None:
        """Write the records that changed (a store that cannot be written is not used), with the class dtypes the
        scan read of ``summaries``' files (``class_dtypes``: a function of the text the record rests on)."""
        for path, summary in (summaries or {}).items():
            record = self._records.get(path)
            dtypes = getattr(summary, "class_dtypes", None)
            if record is not None and dtypes and "\0" not in dtypes and "class_dtypes" not in record:
                record["class_dtypes"] = {n: list(v) for n, v in dtypes.items()}
                self._dirty.add(path)
        if self.folder is not None:
            for path in sorted(self._dirty):
                if not save_json(self.folder, self._name(path), self._records[path]):
                    break
        self._dirty.clear()


# A long-lived process with no cache folder (``mpfix server``: every save forgets the project facts) keeps the
# records in memory instead, as JSON texts (each scan decodes its own copy), oldest dropped past _MEMORY_LIMIT.
MEMORY = Path("<memory>")
_MEMORY: dict[str, str] | None = None
_MEMORY_LIMIT = 256 << 20
_MEMORY_SIZE = [0]  # characters held


def keep_in_memory(on: bool = True) -> None:
    """Keep the records in this process's memory when there is no cache folder (off: forget them)."""
    global _MEMORY
    _MEMORY = {} if on else None
    _MEMORY_SIZE[0] = 0


def folder() -> Path | None:
    """Where records are kept: the project store (the cache folder), else ``MEMORY`` where kept in memory."""
    found = store.folder()
    return found if found is not None or _MEMORY is None else MEMORY


def load_json(folder: Path, name: str):
    """The value ``save_json`` wrote; None where the file is missing, torn, damaged or not JSON."""
    if folder is MEMORY:
        body = _MEMORY.get(name) if _MEMORY is not None else None
        return json.loads(body) if body is not None else None
    try:
        digest, _, body = safe_read.read_text(folder / name, _LIMIT, follow_outside=True).partition("\n")
        return json.loads(body) if digest == _digest(body) else None
    except (OSError, ValueError, RecursionError):
        return None


def save_json(folder: Path, name: str, value) -> bool:
    """Write ``value`` as ``folder/name`` (its digest first, atomically); False: the store cannot be written."""
    if folder is MEMORY:
        return _remember(name, value)
    import tempfile

    from mpfix.cache_folder import ensure_folder

    try:
        ensure_folder(folder.parent)  # the cache folder's .gitignore, no links
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    except OSError:
        return False
    try:
        body = json.dumps(value, separators=(",", ":"))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(f"{_digest(body)}\n{body}")
        os.replace(tmp, folder / name)
    except (OSError, ValueError, RecursionError):
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return True


def _text(encoded) -> str:
    """Sites are kept as a JSON text inside the record: most are never asked for, and a string costs ``json.loads``
    of the record a scan over its bytes, not an object per value (0.06 s for tf-models' 449 records)."""
    return json.dumps(encoded, separators=(",", ":"))


def _str(value) -> str:
    if not isinstance(value, str):
        raise ValueError("a JSON text")
    return value


def _digest(body: str) -> str:
    return hashlib.blake2b(body.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def recording(is_project_module: Callable[[str], bool]) -> tuple[Callable[[str], bool], dict[str, bool]]:
    """``is_project_module`` with every question and answer noted (the summary rests on them)."""
    asked: dict[str, bool] = {}

    def ask(name: str) -> bool:
        if name not in asked:
            asked[name] = is_project_module(name)
        return asked[name]
    return ask, asked


def _remember(name: str, value) -> bool:
    memory = _MEMORY
    if memory is None:
        return False
    try:
        body = json.dumps(value, separators=(",", ":"))
    except (ValueError, RecursionError):
        return True
    _MEMORY_SIZE[0] += len(body) - len(memory.pop(name, ""))
    memory[name] = body
    while _MEMORY_SIZE[0] > _MEMORY_LIMIT and len(memory) > 1:
        _MEMORY_SIZE[0] -= len(memory.pop(next(iter(memory))))
    return True
