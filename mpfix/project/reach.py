"""Float16 reach of a whole project, scanned once per process and kept between runs in the store."""

from __future__ import annotations

import functools
from pathlib import Path

from mpfix.project import reachability, store
from mpfix.project.files import project_files, remember
from mpfix.project.kinds import Policy


@functools.lru_cache(maxsize=32)
def project_reach(root: Path):
    """Every file of the project under ``root`` that runs under a mixed policy (discovery rules apply).

    Scanned once per process; with a store (the cache folder), once per change of any file's
    size or mtime: a warm run then reads the result instead of every file of the project.
    """
    listing = project_files(root)
    remember(root, listing)  # the project facts read the same listing (``files.listed``)
    files = list(listing)
    if store.folder() is None:
        return reachability.scan_project(root, files)
    stamp = store.fingerprint(root, files)
    data = store.load("reach", root, stamp)
    if data is not None:
        try:
            reached = {path: reachability.Reach(Policy(policy), why, None if fixtures is None else tuple(fixtures))
                       for path, (policy, why, fixtures) in data["reached"].items()}
            return reachability.ProjectReach(root=root, reached=reached, entries=list(data["entries"]))
        except (KeyError, TypeError, ValueError, AttributeError):  # AttributeError: a list, not a table
            pass  # damaged: scan again
    found = reachability.scan_project(root, files)
    store.save("reach", root, stamp, {
        "entries": found.entries,
        "reached": {path: [str(r.policy), r.why, None if r.fixtures is None else list(r.fixtures)]
                    for path, r in found.reached.items()}})
    return found
