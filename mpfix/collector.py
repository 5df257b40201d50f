"""The cyclic garbage collector's setting for a run: many short-lived LibCST trees.

Collect young objects every 10,000 allocations instead of 700: a parse allocates about 10,000
objects per module on average, and each young-generation pass re-scans the live ones. Freezing
first takes everything imported so far out of the collector's view, so full passes scan only
what the run allocates. Measured on the keras corpus: ~3% of a cold check, same peak memory.
"""

from __future__ import annotations

import contextlib
import gc

THRESHOLDS = (10_000, 10, 10)


def tune() -> None:
    """Freeze what exists now and raise the thresholds (a worker process, for its whole life)."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


@contextlib.contextmanager
def tuned():
    """The setting for the ``with`` block; what the process had is restored afterwards."""
    before = gc.get_threshold()
    frozen_by_caller = gc.get_freeze_count() > 0  # an embedding program's own freeze stays as it was:
    if frozen_by_caller:  # a second freeze would make what it allocated since permanent
        gc.set_threshold(*THRESHOLDS)
    else:
        tune()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if not frozen_by_caller:
            gc.unfreeze()
