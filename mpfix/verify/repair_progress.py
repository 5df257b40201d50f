"""Which outcomes of a repair's trial count as progress: a verified state of the working copy (``Outcome``) ranks
by its verdict, and some changes are kept before the verdict agrees with float32 because the next round repairs what
the run then shows; each such change goes again unless a later one makes the verdict better (``unproven``)."""

from __future__ import annotations

from dataclasses import dataclass

from mpfix.verify import candidates as candidates_mod
from mpfix.verify import missing_kernel
from mpfix.verify.changes import Change
from mpfix.verify.verdict import Verdict

# Better verdicts rank higher. A change is kept only if it raises the rank.
RANK = {
    "crashed": 0, "timeout": 0, "no-steps": 0, "non-finite": 1, "stalled": 2, "underflow": 2, "unstable": 2,
    "diverged": 3, "at-risk": 4, "non-finite-metric": 4, "healthy": 5,
}
# non-finite-metric: the training itself is healthy and only a metric overflows (metric_judge.py), so a trial that
# stalls or diverges is no progress from it (unranked it was 0, below every such trial).


@dataclass
class Outcome:
    """One verified state of the working copy."""

    verdict: Verdict
    run: object  # RunResult of the mixed run
    # The float32 run it was judged beside when that is not the repair's baseline (a trial judged over more steps).
    baseline: object = None

    @property
    def rank(self) -> int:
        return RANK.get(self.verdict.name, 0)


# Change.extra key: why a change was kept before the verdict agreed with float32.
PROGRESS = "progress"


def into_gradients(current: Outcome, outcome: Outcome) -> bool:
    """A non-finite run made one whose every loss is finite but whose every update the scaler skipped: the
    forward pass's overflow is gone, and the gradients overflow now (running_total_rnn on tf_keras: the RNN in
    float32 left its float16 Dense(16)'s gradients past 65504 at the scale's floor of 1.0). The next round offers
    what a stalled run's evidence names (its largest float16 layers)."""
    run = outcome.run
    if not (current.verdict.name == "non-finite" and outcome.verdict.name == "stalled" and run is not None and run.steps):
        return False
    return all(s.skipped for s in run.steps) and len(run.finite_losses) == len(run.of(run.optimizers[0]))


def kernel_crash_moved(current: Outcome, outcome: Outcome) -> bool:
    """A crash on an op without a float16 kernel became a crash on a float16/float32 mix (held-out glow_flow_k3: its
    invertible layer in float32 returns a float32 log-determinant that meets the float16 couplings' sum): the next
    round casts there. Kept only if a later change ends the crash (``unproven``: no better verdict, nothing kept)."""
    if not (current.verdict.name == outcome.verdict.name == "crashed"):
        return False
    return missing_kernel.read(current.verdict.evidence.get("message")) is not None and \
        missing_kernel.read(outcome.verdict.evidence.get("message")) is None and \
        candidates_mod.crash_mix(outcome.verdict) is not None


def unproven(kept: list[Change], current: Outcome, first: Outcome) -> str | None:
    """Why the kept changes must all go (None: they stay): only progress changes (a NaN moved downstream) and no
    better verdict; or an overflow moved into the gradients that no change ended (a finite loss whose every update
    is skipped trains no better than a NaN one: such a change is a step towards a repair, never one by itself)."""
    if kept and current.rank <= first.rank:
        return "no change made the verdict better: nothing is kept"
    if current.verdict.name == "stalled" and any(c.extra.get(PROGRESS) == "gradients" for c in kept):
        return "the overflow moved into the gradients and no change ended it: nothing is kept"
    return None
