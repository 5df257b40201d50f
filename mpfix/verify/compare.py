"""Parent side: the mixed run's losses beside float32's (no TensorFlow).

``diverged``: the loss ends far from float32's, consistently (a gap batch noise could not
make), per optimizer, and not explained by the updates the loss scaler skipped;
``grows``: a loss that blows up (the ``unstable`` and ``diverged`` verdicts say whether
float32's does too). The thresholds are documented in docs/verify.md.
"""

from __future__ import annotations

import math
import statistics

from mpfix.verify.records import RunResult

# diverged: compared over the tail (the last TAIL_FRACTION of the steps both runs have,
# at least TAIL_MIN), step by step (same seed, same batches), per optimizer:
# the tail means differ by more than DIVERGE_REL of the larger one, ...
DIVERGE_REL = 0.25
# ... and consistently: the mean step-by-step difference is at least DIVERGE_Z standard
# errors away from 0 (a gap that batch-to-batch noise could produce does not count).
DIVERGE_Z = 3.0
TAIL_MIN = 5
TAIL_FRACTION = 0.2

# unstable: the loss grows: the mean of the tail is at least this multiple of the first
# losses (median of the first three) -- in float32 too (or with no baseline to tell).
GROWTH_FACTOR = 10.0


def _applied_before(updates) -> list[int]:
    """For each update, how many updates before it were applied (not skipped): the loss of
    an update is computed with the weights those left."""
    out, applied = [], 0
    for s in updates:
        out.append(applied)
        applied += not s.skipped
    return out


def _paired_tail(mixed: RunResult, baseline: RunResult, optimizer: int, by_applied: bool = False) -> list[tuple[float, float]]:
    """(mixed, float32) finite losses of the same steps, the last TAIL_FRACTION of them
    (at least TAIL_MIN). ``by_applied``: pair the losses computed after the same number of
    applied updates instead (a run whose scaler skipped k warm-up steps lags float32 by
    k updates; that lag is not a precision loss)."""

    def keyed(run):
        updates = run.of(optimizer)
        keys = _applied_before(updates) if by_applied else [s.step for s in updates]
        return [(k, s.loss) for k, s in zip(keys, updates) if s.loss is not None and math.isfinite(s.loss)]

    base: dict = {}
    for key, loss in keyed(baseline):
        base.setdefault(key, loss)
    mixed_keyed: dict = {}
    for key, loss in keyed(mixed):
        mixed_keyed[key] = loss  # the last of a run of skipped updates: same weights
    pairs = [(loss, base[key]) for key, loss in mixed_keyed.items() if key in base]
    size = max(TAIL_MIN, math.ceil(len(pairs) * TAIL_FRACTION))
    return pairs[-size:]


def _gap(tail: list[tuple[float, float]]) -> dict | None:
    if not tail:
        return None
    m = statistics.fmean(a for a, _ in tail)
    b = statistics.fmean(c for _, c in tail)
    gap = abs(m - b)
    relative = gap / max(abs(m), abs(b), 1e-30)
    diffs = [a - c for a, c in tail]
    if len(diffs) > 1:
        spread = statistics.stdev(diffs) / math.sqrt(len(diffs))
        z = abs(statistics.fmean(diffs)) / spread if spread > 0 else (math.inf if gap > 0 else 0.0)
    else:
        z = math.inf if gap > 0 else 0.0
    if relative > DIVERGE_REL and z >= DIVERGE_Z:
        return {
            "final_loss": m,
            "float32_final_loss": b,
            "relative_difference": relative,
            # JSON has no Infinity: a gap with no spread at all is "inf".
            "z": round(z, 2) if math.isfinite(z) else "inf",
            "tail_steps": len(tail),
        }
    return None


def diverged(mixed: RunResult, baseline: RunResult) -> dict | None:
    """Evidence that the mixed run's loss ends far from float32's (see DIVERGE_*), for
    the first optimizer where it does; None when it does not. When either run skipped
    updates, the gap must also hold between losses after the same number of applied
    updates: a lag the skipped steps explain is not divergence."""
    for optimizer in mixed.optimizers:
        gap = _gap(_paired_tail(mixed, baseline, optimizer))
        if gap is None:
            continue
        skips = any(s.skipped for s in mixed.of(optimizer)) or any(s.skipped for s in baseline.of(optimizer))
        if skips:
            aligned = _gap(_paired_tail(mixed, baseline, optimizer, by_applied=True))
            if aligned is None:
                continue
            gap["aligned_by_applied_updates"] = True
        gap["optimizer"] = optimizer
        gap["skipped_steps"] = mixed.skipped_steps
        return gap
    return None


def lag_explained(mixed: RunResult, baseline: RunResult) -> bool:
    """Whether the per-step comparison differs but the applied-update one does not."""
    for optimizer in mixed.optimizers:
        if _gap(_paired_tail(mixed, baseline, optimizer)) is not None:
            return True
    return False


def first_losses(run: RunResult) -> tuple[float, float] | None:
    losses = run.finite_losses
    if len(losses) < TAIL_MIN + 3:
        return None
    first = statistics.median(losses[:3])
    size = max(TAIL_MIN, math.ceil(len(losses) * TAIL_FRACTION))
    return first, statistics.fmean(losses[-size:])


def grows(run: RunResult) -> tuple[float, float] | None:
    ends = first_losses(run)
    if ends is None:
        return None
    first, tail = ends
    return ends if tail > GROWTH_FACTOR * max(abs(first), 1e-30) else None


def grows_alone(mixed: RunResult, baseline: RunResult) -> dict | None:
    """The mixed loss grows (GROWTH_FACTOR) while float32's does not: diverged, whatever the
    step-by-step z (a geometric blow-up has a spread as large as its mean)."""
    growth = grows(mixed)
    ends = first_losses(baseline)
    if growth is None or ends is None or grows(baseline) is not None:
        return None
    return {
        "grows": True,
        "first_loss": growth[0],
        "final_loss": growth[1],
        "float32_first_loss": ends[0],
        "float32_final_loss": ends[1],
        "relative_difference": abs(growth[1] - ends[1]) / max(abs(growth[1]), abs(ends[1]), 1e-30),
        "optimizer": mixed.optimizers[0],
    }
