"""Project facts kept between runs in the cache folder, keyed by every project file's size and mtime.

A warm run then reads one small JSON file instead of every file of the project. A store that
cannot be read or written is not used: it only ever saves time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from mpfix import safe_read

# Where facts are kept between runs (set by mpfix.cache when the cache is in use; None: memory only).
_STORE: list[Path | None] = [None]


def use(directory: Path | None) -> None:
    _STORE[0] = directory


def folder() -> Path | None:
    return _STORE[0]


def fingerprint(root: Path, files) -> str:
    """mpfix's version and code, and the size and mtime of every file: what a stored fact rests on."""
    from mpfix import __version__
    from mpfix.cache_folder import code_fingerprint

    digest = hashlib.blake2b(repr((__version__, str(root), code_fingerprint())).encode(), digest_size=16)
    for file in files:
        try:
            st = os.stat(file)
        except OSError:
            continue
        digest.update(f"{file}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _file(store: Path, kind: str, root: Path) -> Path:
    return store / f"{kind}-{hashlib.blake2b(str(root).encode(), digest_size=8).hexdigest()}.json"


def load(kind: str, root: Path, stamp: str) -> dict | None:
    """The ``kind`` facts stored for ``root`` under ``stamp``; None when missing, stale or damaged."""
    store = _STORE[0]
    if store is None:
        return None
    try:
        data = json.loads(safe_read.read_text(_file(store, kind, root), 64 << 20, follow_outside=True))
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        return None
    if not isinstance(data, dict) or data.get("fingerprint") != stamp or not isinstance(data.get("facts"), dict):
        return None
    return data["facts"]


def save(kind: str, root: Path, stamp: str, facts: dict) -> None:
    store = _STORE[0]
    if store is None:
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
