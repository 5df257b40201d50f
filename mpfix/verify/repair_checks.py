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


def warming_up(run) -> bool:
    """A dynamic loss scale still in its first descent when the run ended: each optimizer's updates skipped from
    the first one, the scale falling at every skip, none skipped after that prefix, the prefix at least half the
    run, and every loss finite. The scaler is still searching for a scale the gradients fit (a change that made
    the forward pass finite leaves gradients ~10^4 x the scale of 32768 to come down from: turn 16's
    leaky_scan); ``stalled`` counts such a run's skips, but only a longer run tells a warm-up from a stall."""
    if run is None or not run.steps or run.crash is not None or not all(s.loss_finite for s in run.steps):
        return False
    for optimizer in run.optimizers:
        updates = run.of(optimizer)
        warm = 0
        while warm < len(updates) and updates[warm].skipped:
            warm += 1
        scales = [s.loss_scale for s in updates[:warm]]
        if not updates or not all(s.dynamic for s in updates) or any(s.skipped for s in updates[warm:]) \
                or 2 * warm < len(updates) or None in scales \
                or any(later >= earlier for earlier, later in zip(scales, scales[1:])):
            return False
    return True


def enough_updates(run, steps: int) -> bool:
    """A run judged over more steps after a warm-up proves a change only with updates to compare: at least half
    the steps asked for (3 at least) applied. A script that ends first (turn 16's leaky_scan: 12 steps, 11 of
    them the scaler's warm-up, one update paired with float32's) proves nothing."""
    return run is not None and sum(not s.skipped for s in run.steps) >= max(3, steps // 2)


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
