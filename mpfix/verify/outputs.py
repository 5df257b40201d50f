"""Parent side: what each run of the script wrote into its working directory.

Every run (mixed, float32) has the script's folder as working directory (relative data
paths must resolve), so files a script saves there (checkpoints, logs, exported models) are
written by both runs, and the float32 run's replace the mixed run's. verify does not copy
the user's folder (it may hold the data set); it says which files both runs wrote, from a
listing (path, size, modification time) of the folder before and after each run.
"""

from __future__ import annotations

import os
from pathlib import Path

# A folder bigger than this is not listed (the note is then left out, never a slow start).
MAX_ENTRIES = 20000
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", ".git", ".venv", "venv"})
SHOWN = 5


def listing(folder: Path) -> dict[str, tuple[int, int]] | None:
    """relative path -> (size, mtime_ns) of the files under ``folder``; None when there are
    more than MAX_ENTRIES."""
    out: dict[str, tuple[int, int]] = {}
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            if len(out) + len(stack) > MAX_ENTRIES:
                return None
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in SKIPPED_DIRS and not entry.name.startswith("mpfix-verify-"):
                        stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    out[os.path.relpath(entry.path, folder)] = (st.st_size, st.st_mtime_ns)
            except OSError:
                continue
    return out


def written(before, after) -> list[str]:
    """Files created or changed between two listings."""
    if before is None or after is None:
        return []
    return sorted(path for path, stat in after.items() if before.get(path) != stat)


class Outputs:
    """Listings of the working directory around each run; ``notes`` says what both wrote."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.last = listing(folder)
        self.by_run: dict[str, list[str]] = {}
        self.concurrent = False

    def after(self, mode: str, concurrent: bool = False) -> None:
        """Record what the run ``mode`` (just ended) wrote; ``concurrent``: another run was
        running at the same time (what it wrote is then shared)."""
        now = listing(self.folder)
        self.by_run[mode] = written(self.last, now)
        self.concurrent = self.concurrent or concurrent
        self.last = now

    def notes(self) -> list[str]:
        mixed, float32 = self.by_run.get("mixed", []), self.by_run.get("float32", [])
        if self.concurrent:
            both = sorted(set(mixed) | set(float32))
            if not both:
                return []
            return [
                f"the mixed and float32 runs ran at once (--jobs 2) in {self.folder} and wrote {_names(both)}: "
                "which run each file is from is not known; run with --jobs 1 or --no-baseline to keep the mixed run's"
            ]
        both = [path for path in mixed if path in set(float32)]
        if not both:
            return []
        return [
            f"both runs wrote {_names(both)} in {self.folder} (their working directory): what is there now is the "
            "float32 run's; run with --no-baseline to keep the mixed run's"
        ]


def _names(paths: list[str]) -> str:
    shown = ", ".join(paths[:SHOWN])
    return shown + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")
