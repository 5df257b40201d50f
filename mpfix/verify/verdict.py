"""Parent side: judge a mixed-precision run, beside its float32 baseline when there is one.

Verdicts are checked in this order; the first that applies wins:

timeout, non-finite, crashed, no-steps, stalled, underflow, diverged, healthy.

(non-finite comes before crashed: a script that crashes after its loss went NaN crashed
because of it.) The thresholds below are documented in docs/verify.md.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from mpfix.verify.frames import describe, last_user_frame
from mpfix.verify.records import RunResult

EXIT_CODES = {
    "healthy": 0,
    "non-finite": 10,
    "stalled": 11,
    "underflow": 12,
    "diverged": 13,
    "crashed": 14,
    "timeout": 15,
    "no-steps": 16,
}
BAD = frozenset(EXIT_CODES) - {"healthy"}

# stalled: this share of the second half of the steps skipped by the loss scaler.
STALL_SKIPPED_FRACTION = 0.9
# stalled: a dynamic loss scale below this has collapsed towards 0 (Keras 3 has no floor;
# Keras 2 stops at 1.0).
STALL_SCALE_COLLAPSED = 2.0**-10
# stalled: at least this many finite losses, all equal to this relative tolerance.
STALL_FROZEN_MIN_STEPS = 5
STALL_FROZEN_RTOL = 1e-6
# underflow: median share of exactly-zero gradient entries in the mixed run ...
UNDERFLOW_ZERO_FRACTION = 0.5
# ... at least this much above float32's median share ...
UNDERFLOW_MARGIN = 0.25
# ... or, without a baseline, at least this share.
UNDERFLOW_ALONE = 0.9
# diverged: tail means (last TAIL steps) differ by more than this fraction of the
# baseline's loss magnitude (max of |first|, |tail|).
DIVERGE_REL = 0.10
TAIL = 5

NO_STEPS_HINT = (
    "verify counts Keras optimizer steps (Model.fit / train_on_batch, or "
    "optimizer.apply_gradients / apply in a custom loop). Point it at the script that "
    "trains (if training sits behind a flag or a subcommand, pass them after `--`, e.g. "
    "`mpfix verify main.py -- train --epochs 1`), or make the script update weights "
    "through a Keras optimizer."
)


@dataclass
class Verdict:
    name: str
    summary: str
    evidence: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.name]

    @property
    def bad(self) -> bool:
        return self.name in BAD

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "exit_code": self.exit_code,
            "summary": self.summary,
            "evidence": self.evidence,
            "notes": self.notes,
        }


def _tail_mean(values: list[float]) -> float:
    tail = values[-TAIL:]
    return sum(tail) / len(tail)


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.4g}"


def first_nonfinite(run: RunResult):
    """(step, what, value) of the first non-finite loss or applied non-finite gradients."""
    for s in run.steps:
        loss_bad = s.loss is not None and not math.isfinite(s.loss)
        grads_bad = s.nonfinite_fraction > 0 and not s.skipped
        if loss_bad or grads_bad:
            what = "loss and gradients" if loss_bad and s.nonfinite_fraction > 0 else ("loss" if loss_bad else "gradients")
            value = s.loss if loss_bad else s.grad_norm
            return s, what, value
    return None


def judge(mixed: RunResult, baseline: RunResult | None, script: Path) -> Verdict:
    notes = _baseline_notes(baseline)
    usable = baseline if baseline is not None and _usable(baseline) else None

    if mixed.timed_out:
        return Verdict(
            "timeout",
            f"the script did not finish within the timeout ({len(mixed.steps)} steps measured); "
            "its whole process group was killed",
            {"steps": len(mixed.steps), "elapsed_s": round(mixed.elapsed, 1)},
            notes,
        )

    bad = first_nonfinite(mixed)
    if bad is not None:
        step, what, value = bad
        evidence = {"step": step.step, "value": _fmt(value), "in": what, "loss_scale": step.loss_scale}
        if baseline is not None and first_nonfinite(baseline) is not None:
            notes.append("the float32 baseline is non-finite too: the cause is not mixed precision")
        return Verdict(
            "non-finite",
            f"non-finite {what} at step {step.step} (value {_fmt(value)})",
            evidence,
            notes,
        )

    if mixed.crash is not None or mixed.end is None:
        return _crashed(mixed, script, notes)

    if not mixed.steps:
        return Verdict("no-steps", "the script finished without a single optimizer step. " + NO_STEPS_HINT, {}, notes)

    stalled = _stalled(mixed, usable)
    if stalled is not None:
        stalled.notes[:0] = notes
        return stalled

    zeros = statistics.median(s.zero_fraction for s in mixed.steps)
    if usable is not None and usable.steps:
        base_zeros = statistics.median(s.zero_fraction for s in usable.steps)
        underflow = zeros >= UNDERFLOW_ZERO_FRACTION and zeros - base_zeros >= UNDERFLOW_MARGIN
    else:
        base_zeros = None
        underflow = zeros >= UNDERFLOW_ALONE
    if underflow:
        beside = f" (float32: {base_zeros:.1%})" if base_zeros is not None else ""
        return Verdict(
            "underflow",
            f"{zeros:.1%} of gradient entries are exactly zero{beside}: float16 gradients underflow",
            {"zero_fraction": round(zeros, 4), "float32_zero_fraction": None if base_zeros is None else round(base_zeros, 4)},
            notes,
        )

    mixed_losses = mixed.finite_losses
    base_losses = usable.finite_losses if usable is not None else []
    if mixed_losses and base_losses:
        m, b = _tail_mean(mixed_losses), _tail_mean(base_losses)
        magnitude = max(abs(base_losses[0]), abs(b), 1e-12)
        if abs(m - b) > DIVERGE_REL * magnitude:
            return Verdict(
                "diverged",
                f"final loss {_fmt(m)} vs float32 {_fmt(b)}: off by {abs(m - b) / magnitude:.0%} of the "
                f"loss scale of the problem (threshold {DIVERGE_REL:.0%})",
                {"final_loss": m, "float32_final_loss": b, "relative_difference": abs(m - b) / magnitude},
                notes,
            )

    losses = mixed_losses
    summary = f"{len(mixed.steps)} steps, all finite"
    if losses:
        summary += f", loss {_fmt(losses[0])} -> {_fmt(losses[-1])}"
    if base_losses:
        summary += f" (float32: {_fmt(base_losses[0])} -> {_fmt(base_losses[-1])})"
    return Verdict("healthy", summary, {"steps": len(mixed.steps)}, notes)


def _usable(baseline: RunResult) -> bool:
    return bool(baseline.steps) and not baseline.timed_out and first_nonfinite(baseline) is None


def _baseline_notes(baseline: RunResult | None) -> list[str]:
    if baseline is None:
        return []
    if baseline.timed_out:
        return ["the float32 baseline timed out: no comparison"]
    if baseline.crash is not None:
        return [f"the float32 baseline crashed ({baseline.crash.get('type')}): no comparison"]
    if not baseline.steps:
        return ["the float32 baseline made no optimizer step: no comparison"]
    return []


def _crashed(run: RunResult, script: Path, notes: list[str]) -> Verdict:
    if run.crash is not None:
        frame = last_user_frame(run.crash.get("frames", []), script)
        where = describe(frame, script)
        message = run.crash.get("message", "").strip().splitlines()
        head = message[0] if message else ""
        return Verdict(
            "crashed",
            f"{run.crash.get('type')}: {head} (at {where})",
            {"type": run.crash.get("type"), "message": run.crash.get("message"), "frame": frame, "at": where},
            notes,
        )
    tail = run.stderr_tail.strip().splitlines()[-5:]
    return Verdict(
        "crashed",
        f"the child process died without reporting (exit status {run.returncode})",
        {"returncode": run.returncode, "stderr_tail": "\n".join(tail)},
        notes,
    )


def _stalled(run: RunResult, baseline: RunResult | None) -> Verdict | None:
    steps = run.steps
    half = steps[len(steps) // 2 :]
    skipped = sum(s.skipped for s in steps)
    scales = [s.loss_scale for s in steps if s.loss_scale is not None]
    evidence = {
        "steps": len(steps),
        "skipped": skipped,
        "first_scale": scales[0] if scales else None,
        "last_scale": scales[-1] if scales else None,
    }
    if len(steps) >= 3 and half and sum(s.skipped for s in half) / len(half) >= STALL_SKIPPED_FRACTION:
        floor = " (pinned at its floor of 1.0)" if scales and scales[-1] == 1.0 else ""
        return Verdict(
            "stalled",
            f"{skipped} of {len(steps)} steps skipped by the loss scaler; scale "
            f"{_fmt(evidence['first_scale'])} -> {_fmt(evidence['last_scale'])}{floor}: weights are not updated",
            evidence,
        )
    if scales and any(s.dynamic for s in steps) and scales[-1] < STALL_SCALE_COLLAPSED:
        return Verdict(
            "stalled",
            f"the dynamic loss scale collapsed towards 0 ({_fmt(scales[-1])}): gradients overflow at any scale",
            evidence,
        )
    losses = run.finite_losses
    if len(losses) >= STALL_FROZEN_MIN_STEPS and _frozen(losses):
        base = baseline.finite_losses if baseline is not None else []
        if not (len(base) >= STALL_FROZEN_MIN_STEPS and _frozen(base)):
            beside = f" while float32 moves {_fmt(base[0])} -> {_fmt(base[-1])}" if base else ""
            evidence["loss"] = losses[-1]
            return Verdict("stalled", f"loss frozen at {_fmt(losses[-1])} for {len(losses)} steps{beside}", evidence)
    return None


def _frozen(losses: list[float]) -> bool:
    hi, lo = max(losses), min(losses)
    return hi - lo <= STALL_FROZEN_RTOL * max(abs(hi), abs(lo), 1e-30)
