"""Parse source with LibCST, without re-checking what its parser already guarantees.

Every LibCST node runs ``_validate()`` from ``__post_init__``. That check is for
trees built by hand (a rule's replacement nodes); a tree the parser built from
source is valid by construction, yet re-checking it costs about a fifth of a
parse on real code (``benchmarks/bench_check.py`` measures it). ``parse_module``
switches the check off for the parse only: nodes built anywhere else, fixes
included, are still validated. Fixed text is re-parsed here and also compiled
by CPython before it is written, so nothing relies on the skipped check.
"""

from __future__ import annotations

import threading

import libcst as cst

# The hook is LibCST's internal detail: a version without it gets the plain parse.
_VALIDATING_INIT = cst.CSTNode.__dict__.get("__post_init__")

_LOCK = threading.Lock()


def _skip_validation(self: object) -> None:
    return None


def parse_module(text: str) -> cst.Module:
    """``libcst.parse_module(text)``, minus the node re-validation; same tree, same errors."""
    if _VALIDATING_INIT is None:  # pragma: no cover
        return cst.parse_module(text)
    # The hook is class-wide: a lock keeps two parsing threads from restoring it early.
    with _LOCK:
        cst.CSTNode.__post_init__ = _skip_validation
        try:
            return cst.parse_module(text)
        finally:
            cst.CSTNode.__post_init__ = _VALIDATING_INIT


def validation_active() -> bool:
    """True when LibCST validates new nodes (always, outside ``parse_module``)."""
    return cst.CSTNode.__dict__.get("__post_init__") is _VALIDATING_INIT
