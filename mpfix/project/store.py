"""Project facts kept between runs in the cache folder, keyed by every project file's size, mtime, ctime and inode.

A warm run then reads one small JSON file instead of every file of the project. A store that
cannot be read or written is not used: it only ever saves time. A file changed within the last ``RACY_NS``
may be written again in the same timestamp tick at the same size, leaving every stamp as it was (git's "racily
clean" entries): such a file's stamp is its content's digest as well, as git compares a racily clean file's content.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from mpfix import safe_read

# File timestamps are as coarse as 1-4 ms on Linux and 2 s on FAT: a file changed within this window may change
# again in the same tick at the same size (also ``file_records``' per-file records).
RACY_NS = 2_000_000_000
_RACY_LIMIT = 64 << 20  # a racy file larger than this is not hashed: no facts stored or loaded that run


def racy(st: os.stat_result, now: int | None = None) -> bool:
    """Whether a file's stamps cannot yet tell a later edit apart: it changed (mtime or ctime: a tool may set mtime
    back) within ``RACY_NS`` of now, git's "racily clean"."""
    return (time.time_ns() if now is None else now) - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_NS


# Where facts are kept between runs (set by mpfix.cache when the cache is in use; None: memory only).
_STORE: list[Path | None] = [None]


def use(directory: Path | None) -> None:
    _STORE[0] = directory


def folder() -> Path | None:
    return _STORE[0]


def fingerprint(root: Path, files) -> str | None:
    """mpfix's version and code, every file's size, mtime, ctime and inode, and the content of each file changed too
    recently for those to tell a later edit apart: what a stored fact rests on. None (nothing is loaded or saved)
    where such a file cannot be read. Taken before the facts read the files: an edit after it, in the same tick,
    leaves a digest of the older content, so the next run computes the facts again."""
    from mpfix import __version__
    from mpfix.cache_folder import code_fingerprint

    digest = hashlib.blake2b(repr((__version__, str(root), code_fingerprint())).encode(), digest_size=16)
    now = time.time_ns()
    for file in files:
        try:
            st = os.stat(file)
        except OSError:
            continue
        digest.update(f"{file}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\n".encode())
        if racy(st, now):
            try:
                digest.update(hashlib.blake2b(safe_read.read_bytes(file, _RACY_LIMIT, follow_outside=True)).digest())
            except OSError:  # Refused too: a file that is no longer regular, or has grown past the limit
                return None
    return digest.hexdigest()


def _file(store: Path, kind: str, root: Path) -> Path:
    return store / f"{kind}-{hashlib.blake2b(str(root).encode(), digest_size=8).hexdigest()}.json"


def load(kind: str, root: Path, stamp: str | None) -> dict | None:
    """The ``kind`` facts stored for ``root`` under ``stamp``; None when missing, stale or damaged, or without a
    stamp (a file changed just now that could not be read)."""
    store = _STORE[0]
    if store is None or stamp is None:
        return None
    try:
        data = json.loads(safe_read.read_text(_file(store, kind, root), 64 << 20, follow_outside=True))
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        return None
    if not isinstance(data, dict) or data.get("fingerprint") != stamp or not isinstance(data.get("facts"), dict):
        return None
    return data["facts"]


def save(kind: str, root: Path, stamp: str | None, facts: dict) -> None:
    store = _STORE[0]
    if store is None or stamp is None:
        return
    import tempfile

    from mpfix.cache_folder import ensure_folder

    try:
        ensure_folder(store.parent)  # the cache folder's .gitignore
        store.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=store)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"fingerprint": stamp, "facts": facts}, handle, separators=(",", ":"))
        os.replace(tmp, _file(store, kind, root))
    except OSError:
        pass
