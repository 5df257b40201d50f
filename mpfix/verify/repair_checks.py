"""The checks a repaired run must pass against the original's float32 baseline."""

from __future__ import annotations

from mpfix.verify.baseline_notes import first_nonfinite, own_float16
from mpfix.verify.changes import ChangeKind
from mpfix.verify.compare import diverged
from mpfix.verify.verdict import STALL_SKIPPED_FRACTION


def usable(run) -> bool:
    return run is not None and run.crash is None and not run.timed_out and bool(run.steps)


def agrees(mixed, baseline) -> bool:
    """The final loss agrees with float32 as verify judges it: finite, and not diverged."""
    if mixed is None or not mixed.steps or mixed.crash is not None:
        return False
    if not all(s.loss_finite for s in mixed.steps):
        return False
    # A run whose later updates were (nearly) all skipped, as `stalled` counts them, learns nothing, whatever its loss: `diverged` pairs
    # losses after the same number of applied updates when steps were skipped, and finds no pair here
    # (wave 8's accum_class_k2: a float32 layer turned non-finite into stalled at a loss of 2e7 beside
    # float32's 1.2, and was kept).
    later = mixed.steps[len(mixed.steps) // 2:]
    if later and sum(s.skipped for s in later) / len(later) >= STALL_SKIPPED_FRACTION:
        return False
    return diverged(mixed, baseline) is None


def same_float32(new, old) -> bool:
    if not usable(new) or new.step_count != old.step_count:
        return False
    return diverged(new, old) is None and all(s.loss_finite for s in new.steps)


def float32_repaired(new, old, kept) -> bool:
    """A float32 run made finite by keeping the script's own data float32: the original's float32
    run was non-finite where it computed in float16 the script cast itself (``own_float16``, or data its input
    pipeline cast to float16: no policy made those values), and every step of the new one is finite."""
    if not any(c.kind is ChangeKind.DATA_CAST for c in kept) or not usable(new):
        return False
    bad = first_nonfinite(old)
    own = bad is not None and (own_float16(old, bad[0].step) is not None or bool(old.data_casts))
    return own and all(s.loss_finite for s in new.steps)
