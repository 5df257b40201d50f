"""Whether float16 compute can reach a file: the dtype policy it runs under, and why.

A mixed policy is global state, so it is often set in one module (``train.py``) and felt in
another (``layers.py``). Which files it reaches is decided by entry points and imports
(``mpfix.codemods.analysis.reachability``): the module that sets the policy, what it imports
within the project, tests that take a fixture parametrised over the policy. A configured
``policy`` (``[tool.mpfix]`` or ``--policy``) decides for every file. The project is scanned
once per process, and its scan kept in the cache folder until a file of it changes.
"""

from __future__ import annotations

import enum
import functools
import os
import re
from pathlib import Path

from mpfix.project import root_of_folder

_FLOAT16 = re.compile(r"""['"]mixed_float16['"]""")
_BFLOAT16 = re.compile(r"""['"]mixed_bfloat16['"]""")


class Policy(str, enum.Enum):
    NONE = "none"  # float32 only, as far as we can see
    FLOAT16 = "mixed_float16"
    BFLOAT16 = "mixed_bfloat16"

    def __str__(self) -> str:
        return self.value


def policy_in_text(text: str) -> Policy:
    """The mixed policy a source text names (in any string); float16 wins when both appear."""
    if _FLOAT16.search(text):
        return Policy.FLOAT16
    if _BFLOAT16.search(text):
        return Policy.BFLOAT16
    return Policy.NONE


def project_root(path: Path) -> Path:
    """Nearest folder above ``path`` that starts a project (``mpfix.project``); its folder if none does."""
    # Keyed by the absolute folder: a relative one ("." for ``train.py``) names another folder
    # once the working directory changes (a test, a long-lived server), and would get its root.
    return _root_of_folder(os.path.abspath(Path(path).parent), os.getcwd())


@functools.lru_cache(maxsize=4096)
def _root_of_folder(folder: str, cwd: str) -> Path:
    # Per folder, once per process: the engine asks for every file it lints.
    path = Path(folder)
    try:
        path = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        path = path.absolute()
    root = root_of_folder(str(path), cwd)
    return path if root is None else Path(root)


# Where scans are kept between runs (set by mpfix.cache when the cache is in use; None: memory only).
_STORE: list[Path | None] = [None]


def use_store(directory: Path | None) -> None:
    """Keep project scans in ``directory`` between runs (the cache folder), keyed by the files' stats."""
    _STORE[0] = directory


@functools.lru_cache(maxsize=32)
def project_reach(root: Path):
    """Every file of the project under ``root`` that runs under a mixed policy (discovery rules apply).

    Scanned once per process; with a store (the cache folder), once per change of any file's
    size or mtime: a warm run then reads the result instead of every file of the project.
    """
    from mpfix.codemods.analysis.reachability import scan_project
    from mpfix.discovery import discover  # local: discovery imports config

    files = list(discover([root], exclude=()))
    store = _STORE[0]
    if store is None:
        return scan_project(root, files)
    fingerprint = _fingerprint(root, files)
    found = _load_scan(store, root, fingerprint)
    if found is None:
        found = scan_project(root, files)
        _save_scan(store, root, fingerprint, found)
    return found


def _fingerprint(root: Path, files: list[Path]) -> str:
    import hashlib
    import os

    from mpfix import __version__
    from mpfix.cache import _code_fingerprint

    digest = hashlib.blake2b(repr((__version__, str(root), _code_fingerprint())).encode(), digest_size=16)
    for file in files:
        try:
            st = os.stat(file)
        except OSError:
            continue
        digest.update(f"{file}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _scan_file(store: Path, root: Path) -> Path:
    import hashlib

    return store / f"reach-{hashlib.blake2b(str(root).encode(), digest_size=8).hexdigest()}.json"


def _load_scan(store: Path, root: Path, fingerprint: str):
    import json

    from mpfix.codemods.analysis.reachability import ProjectReach, Reach

    try:
        data = json.loads(_scan_file(store, root).read_text(encoding="utf-8"))
        if data.get("fingerprint") != fingerprint:
            return None
        reached = {path: Reach(Policy(policy), why, None if fixtures is None else tuple(fixtures))
                   for path, (policy, why, fixtures) in data["reached"].items()}
        return ProjectReach(root=root, reached=reached, entries=list(data["entries"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing, stale or damaged: scan again


def _save_scan(store: Path, root: Path, fingerprint: str, found) -> None:
    import json
    import os
    import tempfile

    data = {"fingerprint": fingerprint, "entries": found.entries,
            "reached": {path: [str(r.policy), r.why, None if r.fixtures is None else list(r.fixtures)]
                        for path, r in found.reached.items()}}
    from mpfix.cache import _ensure_folder

    try:
        _ensure_folder(store.parent)  # the cache folder's .gitignore
        store.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=store)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, separators=(",", ":"))
        os.replace(tmp, _scan_file(store, root))
    except OSError:
        pass  # a cache only ever saves time


def policy_in_project(root: Path) -> Policy:
    """The strongest mixed policy any file of the project runs under."""
    return project_reach(root).policy


policy_in_project.cache_clear = project_reach.cache_clear  # type: ignore[attr-defined]


_CONFIGURED = {"mixed_float16": Policy.FLOAT16, "mixed_bfloat16": Policy.BFLOAT16, "float32": Policy.NONE}


def reach_for(path: Path, text: str | None = None, *, configured: str | None = None, project: bool = True):
    """The policy ``path`` runs under and why (a ``reachability.Reach``).

    ``configured``: the ``policy`` setting, which decides for every file. ``project``: consult
    the rest of the project (else only the file's own entry points). ``text``: the file's
    current text, when it may differ from what is on disk (fix passes, notebooks).
    """
    from mpfix.codemods.analysis.reachability import Reach, reach_in_text

    if configured in _CONFIGURED:
        return Reach(_CONFIGURED[configured], f"configured: policy = {configured!r}")
    found = project_reach(project_root(path)).reach_for(path) if project else None
    if found is not None and found.policy is Policy.FLOAT16:
        return found
    # The file's own text may set a policy the project scan did not see (it read the disk).
    own = reach_in_text(text, path) if text is not None else None
    if own is not None and (own.policy is Policy.FLOAT16 or found is None or found.policy is Policy.NONE):
        return own if own.policy is not Policy.NONE or found is None else found
    if found is not None:
        return found
    return Reach(Policy.NONE, "the project was not consulted")


def describe(files, configured: str | None = None, shown: int = 50) -> list[str]:
    """``--verbose`` lines: the policy each checked file runs under, and why (the entry point)."""
    from mpfix.output import display_path

    if configured in _CONFIGURED:
        return [f"policy {_CONFIGURED[configured]} for all {len(files)} files: configured ({configured!r})"]
    reached, unreached = [], []
    for path in files:
        reach = reach_for(Path(path))
        (unreached if reach.policy is Policy.NONE else reached).append((display_path(str(path)), reach))
    lines = [f"float16 reachability: {len(reached)} of {len(files)} files run under a mixed policy "
             "(set `policy` in [tool.mpfix] or pass --policy to decide for every file)"]
    for name, reach in reached[:shown]:
        lines.append(f"  {name}: {reach.policy} — {reach.why}")
    if len(reached) > shown:
        lines.append(f"  … and {len(reached) - shown} more")
    if unreached:
        lines.append(f"  {len(unreached)} file{'s' if len(unreached) != 1 else ''} with no mixed policy: "
                     f"{unreached[0][1].why}")
    return lines


def forget_projects() -> None:
    """Forget every project's root and scan (a long-lived process: files were created or saved)."""
    from mpfix import declared, project

    project_reach.cache_clear()
    _root_of_folder.cache_clear()
    project.is_project_root.cache_clear()
    declared.clear()
