"""The checks a repaired run must pass against the original's float32 baseline."""

from __future__ import annotations

from mpfix.verify.baseline_notes import first_nonfinite, own_float16
from mpfix.verify.changes import ChangeKind
from mpfix.verify.compare import diverged


def usable(run) -> bool:
    return run is not None and run.crash is None and not run.timed_out and bool(run.steps)


def agrees(mixed, baseline) -> bool:
    """The final loss agrees with float32 as verify judges it: finite, and not diverged."""
    if mixed is None or not mixed.steps or mixed.crash is not None:
        return False
    if not all(s.loss_finite for s in mixed.steps):
        return False
    return diverged(mixed, baseline) is None


def same_float32(new, old) -> bool:
    if not usable(new) or new.step_count != old.step_count:
        return False
    return diverged(new, old) is None and all(s.loss_finite for s in new.steps)


def float32_repaired(new, old, kept) -> bool:
    """A float32 run made finite by keeping the script's own data float32: the original's float32
    run was non-finite where it computed in float16 the script cast itself (``own_float16``: no
    policy made those values), and every step of the new one is finite."""
    if not any(c.kind is ChangeKind.DATA_CAST for c in kept) or not usable(new):
        return False
    bad = first_nonfinite(old)
    return bad is not None and own_float16(old, bad[0].step) is not None and all(s.loss_finite for s in new.steps)
