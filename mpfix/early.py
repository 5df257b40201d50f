"""Files that need no project facts, checked while the project pass runs (``runner._scan_projects``).

The project pass (``facts.prepare``) runs in the parent and its helper processes before the workers are
forked, and its parent-serial parts (the reach scan, the reads before the summaries are queued, the
collection after them) leave a core idle on a two-core machine. A file in which no float16 rule's trigger
occurs needs nothing that pass computes: its rules run without the reach, the cross-file calls or the
callers index (``Engine._select`` consults the reach only for a triggered float16 rule, and ``file_facts``
reads the project only with ``float16_rules``), and its cache key holds only what the project declares
(``Keyer.key``: ``file_facts(..., float16_rules=False)`` where no float16 trigger occurs in the bytes).
Such files are handed to the helpers first (each helper is set up as a worker, ``runner._init_worker``),
so that they fill that idle time; every other file waits for the workers, as before. Each is checked by the
same ``process_file`` in a process forked from the same parent: the findings are the same.
"""

from __future__ import annotations

import os
from pathlib import Path

# MPFIX_EARLY=0: the workers check every file, as before (an A/B at one commit, benchmarks/bench_check.py).
ENABLED = os.environ.get("MPFIX_EARLY", "1") != "0"


def facts_free(path: Path, data: bytes, ignored: tuple[str, ...], engine, keyer) -> bool:
    """Whether checking ``path`` (its bytes ``data``) reads no project fact: a source file (a notebook's
    triggers are its cells'), in whose bytes (the cache key's test) and text (the engine's) no float16
    rule that runs is triggered."""
    if path.suffix == ".ipynb":
        return False
    if keyer is not None and keyer._float16_triggered(data, ignored):
        return False
    from mpfix.source import SourceError, decode

    try:
        text = decode(data).text
    except SourceError:
        return True  # reported as it is, before any rule runs
    return not any(rule.requires_float16 and not (ignored and rule.code.startswith(ignored)) and rule.may_match(text)
                   for rule in engine.rules)


def collect(pending: dict, results: list, bar) -> None:
    """Fill ``results`` from the helpers' early batches (``pending``: future -> indices); a batch whose helper
    died or whose file was not facts-free (None) is left to the workers."""
    for future, batch in pending.items():
        try:
            done = future.result()
        except Exception:  # BrokenProcessPool: the workers check these files
            continue
        for i, result in zip(batch, done):
            if result is not None:
                results[i] = result
                bar.update()
