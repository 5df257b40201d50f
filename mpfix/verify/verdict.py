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
# diverged: compared over the tail (the last TAIL_FRACTION of the steps both runs have,
# at least TAIL_MIN), step by step (same seed, same batches), per optimizer:
# the tail means differ by more than DIVERGE_REL of the larger one, ...
DIVERGE_REL = 0.25
# ... and consistently: the mean step-by-step difference is at least DIVERGE_Z standard
# errors away from 0 (a gap that batch-to-batch noise could produce does not count).
DIVERGE_Z = 3.0
TAIL_MIN = 5
TAIL_FRACTION = 0.2

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


def _paired_tail(mixed: RunResult, baseline: RunResult, optimizer: int) -> list[tuple[float, float]]:
    """(mixed, float32) finite losses of the same steps, the last TAIL_FRACTION of them
    (at least TAIL_MIN)."""
    base = {s.step: s.loss for s in baseline.of(optimizer) if s.loss is not None and math.isfinite(s.loss)}
    pairs = [
        (s.loss, base[s.step])
        for s in mixed.of(optimizer)
        if s.loss is not None and math.isfinite(s.loss) and s.step in base
    ]
    size = max(TAIL_MIN, math.ceil(len(pairs) * TAIL_FRACTION))
    return pairs[-size:]


def diverged(mixed: RunResult, baseline: RunResult) -> dict | None:
    """Evidence that the mixed run's loss ends far from float32's (see DIVERGE_*), for
    the first optimizer where it does; None when it does not."""
    for optimizer in mixed.optimizers:
        tail = _paired_tail(mixed, baseline, optimizer)
        if not tail:
            continue
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
                "optimizer": optimizer,
            }
    return None


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.4g}"


def _fmt_scale(x) -> str:
    """Loss scales are powers of two: 32768, not 3.277e+04."""
    return f"{x:.10g}" if isinstance(x, float) and math.isfinite(x) else _fmt(x)


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
            f"the script did not finish within the timeout ({_steps(mixed)} measured); "
            "its whole process group was killed",
            {"steps": mixed.step_count, "elapsed_s": round(mixed.elapsed, 1)},
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

    if usable is not None:
        gap = diverged(mixed, usable)
        if gap is not None:
            m, b = gap["final_loss"], gap["float32_final_loss"]
            which = f" (optimizer #{gap['optimizer']})" if len(mixed.optimizers) > 1 else ""
            return Verdict(
                "diverged",
                f"loss over the last {gap['tail_steps']} steps{which} {_fmt(m)} vs float32 {_fmt(b)}: "
                f"{'higher' if m > b else 'lower'} by {gap['relative_difference']:.0%} of the larger "
                f"(threshold {DIVERGE_REL:.0%}), consistently (z {gap['z']} >= {DIVERGE_Z:g})",
                gap,
                notes,
            )

    losses = mixed.finite_losses
    base_losses = usable.finite_losses if usable is not None else []
    summary = f"{_steps(mixed)}, all finite"
    if losses:
        summary += f", loss {_fmt(losses[0])} -> {_fmt(losses[-1])}"
    if base_losses:
        summary += f" (float32: {_fmt(base_losses[0])} -> {_fmt(base_losses[-1])})"
    return Verdict("healthy", summary, {"steps": mixed.step_count}, notes)


def _steps(run: RunResult) -> str:
    text = f"{run.step_count} steps"
    if len(run.optimizers) > 1:
        text += f" ({len(run.optimizers)} optimizers, {len(run.steps)} updates)"
    return text


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
    # Skips and scales are counted per update (several per step with several optimizers).
    steps = run.steps
    half = steps[len(steps) // 2 :]
    skipped = sum(s.skipped for s in steps)
    scales = [s.loss_scale for s in steps if s.loss_scale is not None]
    unit = "steps" if len(run.optimizers) <= 1 else "updates"
    evidence = {
        "steps": run.step_count,
        "skipped": skipped,
        "first_scale": scales[0] if scales else None,
        "last_scale": scales[-1] if scales else None,
    }
    if len(steps) >= 3 and half and sum(s.skipped for s in half) / len(half) >= STALL_SKIPPED_FRACTION:
        floor = " (pinned at its floor of 1.0)" if scales and scales[-1] == 1.0 else ""
        return Verdict(
            "stalled",
            f"{skipped} of {len(steps)} {unit} skipped by the loss scaler; scale "
            f"{_fmt_scale(evidence['first_scale'])} -> {_fmt_scale(evidence['last_scale'])}{floor}: "
            "weights are not updated",
            evidence,
        )
    if scales and any(s.dynamic for s in steps) and scales[-1] < STALL_SCALE_COLLAPSED:
        return Verdict(
            "stalled",
            f"the dynamic loss scale collapsed towards 0 ({_fmt(scales[-1])}): gradients overflow at any scale",
            evidence,
        )
    for optimizer in run.optimizers:
        losses = run.losses_of(optimizer)
        if len(losses) >= STALL_FROZEN_MIN_STEPS and _frozen(losses):
            base = baseline.losses_of(optimizer) if baseline is not None else []
            if not (len(base) >= STALL_FROZEN_MIN_STEPS and _frozen(base)):
                beside = f" while float32 moves {_fmt(base[0])} -> {_fmt(base[-1])}" if base else ""
                which = f" (optimizer #{optimizer})" if len(run.optimizers) > 1 else ""
                evidence["loss"] = losses[-1]
                return Verdict(
                    "stalled", f"loss{which} frozen at {_fmt(losses[-1])} for {len(losses)} steps{beside}", evidence
                )
    return None


def _frozen(losses: list[float]) -> bool:
    hi, lo = max(losses), min(losses)
    return hi - lo <= STALL_FROZEN_RTOL * max(abs(hi), abs(lo), 1e-30)
