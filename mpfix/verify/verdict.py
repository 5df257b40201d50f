"""Parent side: judge a mixed-precision run, beside its float32 baseline when there is one.

Verdicts are checked in this order; the first that applies wins:

timeout, non-finite, crashed, no-steps, stalled, underflow, unstable, at-risk, diverged,
non-finite-metric, healthy (a non-finite metric only replaces healthy: beside another bad verdict it is a note).

(non-finite comes before crashed: a script that crashes after its loss went NaN crashed
because of it.) The thresholds below are documented in docs/verify.md.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from mpfix.verify import metric_judge
from mpfix.verify.frames import describe
from mpfix.verify.compare import DIVERGE_REL, DIVERGE_Z, TAIL_MIN, diverged, grows, grows_alone, lag_explained
from mpfix.verify.logs import crash_report
from mpfix.verify.baseline_notes import (baseline_notes, first_nonfinite, nonfinite_baseline_notes, scaled_gradients_note,
                                         unscaled_gradients_note)
from mpfix.verify.records import RunResult
from mpfix.verify.workers_judge import launcher_hint

EXIT_CODES = {
    "healthy": 0,
    "non-finite": 10,
    "stalled": 11,
    "underflow": 12,
    "diverged": 13,
    "crashed": 14,
    "timeout": 15,
    "no-steps": 16,
    "at-risk": 17,
    "unstable": 18,
    # A Keras metric NaN/Inf under mixed precision while float32's is finite, the run otherwise healthy (metric_judge).
    "non-finite-metric": 19,
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
# at-risk: a float16 layer output whose largest |value| passes this fraction of float16's
# largest finite value (1/8: three doublings from overflow; the healthy scripts of the test
# suite stay below 1%).
FLOAT16_MAX = 65504.0
HEADROOM_FRACTION = 0.125
# at-risk: after the scaler's warm-up (the skipped updates it starts with), at least this
# many skipped updates, more of them in the second half than in the first, and the scale
# fallen by at least this factor.
SCALE_TREND_MIN_SKIPS = 3
SCALE_TREND_FALL = 4.0

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


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.4g}"


def _fmt_scale(x) -> str:
    """Loss scales are powers of two: 32768, not 3.277e+04."""
    return f"{x:.10g}" if isinstance(x, float) and math.isfinite(x) else _fmt(x)


# A stalled verdict's evidence["kind"] when the mixed run applied no update and float32 did.
NO_UPDATES = "no-updates"
# The verdict of a metric NaN/Inf under mixed precision only (metric_judge).
METRIC = "non-finite-metric"
# A non-finite verdict's evidence["cause"] when the applied gradients still carried a loss scale.
SCALED_CAUSE = "scaled-gradients"
# A stalled verdict's evidence["kind"] when the applied gradients were ~1/scale of float32's (the loss was not scaled).
UNSCALED_KIND = "unscaled-gradients"


def judge(mixed: RunResult, baseline: RunResult | None, script: Path, baseline_expected: bool | None = None) -> Verdict:
    """``baseline_expected``: whether a baseline was asked for (False: --no-baseline, so
    the rules that need one say so); by default, whether one is given."""
    verdict = _judge(mixed, baseline, script, baseline_expected)
    if not mixed.metrics or verdict.name in ("non-finite", "timeout"):
        return verdict  # a non-finite loss makes its metrics non-finite too
    usable = baseline is not None and _usable(baseline)
    metric = metric_judge.nonfinite_metric(mixed, baseline if usable else None)
    if metric is None:
        return verdict
    summary = metric_judge.describe(metric, script)
    if verdict.name == "healthy" and usable:
        return Verdict(METRIC, summary, metric, verdict.notes)
    if not usable:
        why = "with no float32 baseline (--no-baseline)" if baseline is None else "with no usable float32 baseline"
        summary += f"; {why} it is not known whether float32's is finite"
    verdict.notes.append(summary)
    return verdict


def _judge(mixed: RunResult, baseline: RunResult | None, script: Path, baseline_expected: bool | None) -> Verdict:
    if baseline_expected is None:
        baseline_expected = baseline is not None
    notes = baseline_notes(baseline)
    usable = baseline if baseline is not None and _usable(baseline) else None

    if mixed.timed_out:
        if not mixed.steps and launcher_hint(mixed.launches):
            notes.append(launcher_hint(mixed.launches))
        return Verdict(
            "timeout",
            f"the script did not finish within the timeout ({_steps(mixed)} measured); "
            "its whole process group was killed",
            {"steps": mixed.step_count, "elapsed_s": round(mixed.elapsed, 1), "skipped_steps": mixed.skipped_steps},
            notes,
        )

    bad = first_nonfinite(mixed)
    if bad is not None:
        step, what, value = bad
        evidence = {"step": step.step, "value": _fmt(value), "in": what, "loss_scale": step.loss_scale}
        if baseline is not None:
            notes.extend(nonfinite_baseline_notes(step.step, baseline))
        scaled = scaled_gradients_note(mixed, usable) if usable is not None else None
        if scaled is not None:
            # The root cause, which offers the loss-scaling fixes (MP1xx) to `repair`.
            evidence["cause"] = SCALED_CAUSE
            notes.insert(0, scaled)
        return Verdict(
            "non-finite",
            f"non-finite {what} at step {step.step} (value {_fmt(value)}){_replicas(step, evidence)}",
            evidence,
            notes,
        )

    failed_exit = (mixed.end or {}).get("status") == "exit" and mixed.exit_status not in (0, None)
    if mixed.crash is not None or mixed.end is None or failed_exit:
        # A non-zero exit after some steps is a failure too (exit 0 would hide it).
        return _crashed(mixed, script, notes)

    if not mixed.steps:
        launcher = launcher_hint(mixed.launches)
        if launcher:
            return Verdict("no-steps", launcher, {"launches": mixed.launches}, notes)
        if usable is not None and usable.steps:
            # Only the policy differs between the runs: a guard on scaled gradients or on a float16
            # value (`if global_norm(grads) < 50: apply_gradients(...)`) that never lets an update through.
            return Verdict("stalled", f"no optimizer update was applied under mixed precision while float32 applied "
                           f"{usable.step_count} steps: a condition on the (scaled) gradients or the loss never let "
                           "one through", {"kind": NO_UPDATES, "float32_steps": usable.step_count}, notes)
        return Verdict("no-steps", "the script finished without a single optimizer step. " + NO_STEPS_HINT, {}, notes)

    stalled = _stalled(mixed, usable, notes, baseline_expected)
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

    unstable = _unstable(mixed, usable, baseline_expected)
    if unstable is not None:
        unstable.notes[:0] = notes
        return unstable

    gap = diverged(mixed, usable) if usable is not None else None
    if gap is None and usable is not None:
        gap = grows_alone(mixed, usable)
    unscaled = unscaled_gradients_note(mixed, usable) if usable is not None else None
    if unscaled is not None:
        # The root cause, whatever the loss did in the steps measured (ten steps can look healthy):
        # stalled, which offers the loss-scaling fixes (MP1xx) to `repair`.
        return Verdict("stalled", unscaled, {"kind": UNSCALED_KIND}, notes)
    risk = at_risk(mixed, script)
    if risk is not None:
        if gap is not None:
            notes.append(
                f"the loss also ends {gap['relative_difference']:.0%} away from float32's "
                f"({_fmt(gap['final_loss'])} vs {_fmt(gap['float32_final_loss'])})"
            )
        risk.notes[:0] = notes
        return risk

    if gap is not None and gap.get("grows"):
        return Verdict(
            "diverged",
            f"the loss grows {_fmt(gap['first_loss'])} -> {_fmt(gap['final_loss'])} while float32's does not "
            f"({_fmt(gap['float32_first_loss'])} -> {_fmt(gap['float32_final_loss'])})",
            gap,
            notes,
        )
    if gap is not None:
        m, b = gap["final_loss"], gap["float32_final_loss"]
        which = f" (optimizer #{gap['optimizer']})" if len(mixed.optimizers) > 1 else ""
        aligned = " and after the same number of applied updates" if gap.get("aligned_by_applied_updates") else ""
        return Verdict(
            "diverged",
            f"loss over the last {gap['tail_steps']} steps{which} {_fmt(m)} vs float32 {_fmt(b)}: "
            f"{'higher' if m > b else 'lower'} by {gap['relative_difference']:.0%} of the larger "
            f"(threshold {DIVERGE_REL:.0%}), consistently (z {gap['z']} >= {DIVERGE_Z:g}){aligned}",
            gap,
            notes,
        )

    if usable is not None and mixed.skipped_steps and lag_explained(mixed, usable):
        notes.append(
            f"the mixed run lags float32 by the {len(mixed.skipped_steps)} skipped step(s) "
            f"({_ranges(mixed.skipped_steps)}); compared after the same number of applied updates "
            "the losses agree"
        )

    losses = mixed.finite_losses
    base_losses = usable.finite_losses if usable is not None else []
    summary = f"{_steps(mixed)}, all finite"
    if losses:
        summary += f", loss {_fmt(losses[0])} -> {_fmt(losses[-1])}"
    if base_losses:
        summary += f" (float32: {_fmt(base_losses[0])} -> {_fmt(base_losses[-1])})"
    return Verdict("healthy", summary, {"steps": mixed.step_count, "skipped_steps": mixed.skipped_steps}, notes)


def _replicas(step, evidence: dict) -> str:
    """' on replica 1' when MirroredStrategy's replicas in one process said which had the
    non-finite value (workers are named by workers_judge)."""
    where = [replica for worker, replica in step.nonfinite_where if worker is None]
    if not where:
        return ""
    evidence["replicas"] = where
    return f" on replica {', '.join(str(r) for r in where)}"


def _ranges(steps: list[int], limit: int = 6) -> str:
    """'0-2, 7, 9' for [0, 1, 2, 7, 9]."""
    groups: list[list[int]] = []
    for s in steps:
        if groups and s == groups[-1][-1] + 1:
            groups[-1].append(s)
        else:
            groups.append([s])
    parts = [f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in groups]
    if len(parts) > limit:
        parts = parts[:limit] + [f"... ({len(steps)} in all)"]
    if not parts:
        return "none"
    return ("step " if len(steps) == 1 else "steps ") + ", ".join(parts)


def _unstable(mixed: RunResult, baseline: RunResult | None, baseline_expected: bool) -> Verdict | None:
    growth = grows(mixed)
    if growth is None:
        return None
    first, tail = growth
    if baseline is not None:
        base = grows(baseline)
        if base is None:
            return None  # only mixed grows: a precision problem (diverged says how far)
        return Verdict(
            "unstable",
            f"float32 diverges too; not a precision problem: the loss grows {_fmt(first)} -> {_fmt(tail)} "
            f"(float32: {_fmt(base[0])} -> {_fmt(base[1])}); look at the learning rate, the data and the "
            "loss itself",
            {"first_loss": first, "final_loss": tail, "float32_first_loss": base[0], "float32_final_loss": base[1]},
        )
    if baseline_expected:
        return None  # the baseline failed: its note says so, and the growth is not judged
    return Verdict(
        "unstable",
        f"the loss grows {_fmt(first)} -> {_fmt(tail)}; without the float32 baseline (--no-baseline) it is "
        "not known whether float32 diverges too",
        {"first_loss": first, "final_loss": tail},
    )


def at_risk(run: RunResult, script: Path) -> Verdict | None:
    """Headroom: a float16 layer output near float16's largest value, or a loss scale that
    keeps falling with more and more skipped updates, in a run that is still finite."""
    limit = HEADROOM_FRACTION * FLOAT16_MAX
    for s in run.steps:
        if s.act_max is not None and math.isfinite(s.act_max) and s.act_max >= limit:
            layer = dict(run.layers.get(s.act_layer, {}))
            peak = max(
                (t for t in run.steps if t.act_layer == s.act_layer and t.act_max is not None and math.isfinite(t.act_max)),
                key=lambda t: t.act_max,
            )
            name = layer.get("name") or f"layer #{s.act_layer}"
            built = describe({"file": layer["file"], "line": layer.get("line")}, script) if layer.get("file") else None
            where = f" (built at {built})" if built else ""
            rule = layer_rule(layer)
            evidence = {
                "kind": "headroom",
                "layer": name,
                "layer_class": layer.get("class"),
                "step": s.step,
                "value": s.act_max,
                "fraction_of_float16_max": round(s.act_max / FLOAT16_MAX, 4),
                "peak_step": peak.step,
                "peak_value": peak.act_max,
                "file": layer.get("file"),
                "line": layer.get("line"),
                "code": layer.get("code"),
                "layer_index": s.act_layer,
                "rule": rule,
                "output_of": layer.get("output_of"),
            }
            return Verdict(
                "at-risk",
                f"float16 output of layer {name!r}{where} reached {_fmt(s.act_max)} at step {s.step} "
                f"({s.act_max / FLOAT16_MAX:.0%} of float16's max 65504; threshold {HEADROOM_FRACTION:.0%}), "
                f"peak {_fmt(peak.act_max)} at step {peak.step}: it will overflow to inf"
                + (f"; {rule} applies" if rule else ""),
                evidence,
            )
    return _scale_trend(run)


def layer_rule(layer: dict) -> str | None:
    """The static rule whose fix applies to an at-risk layer: the one mpfix reports on its
    construction line, else MP205 for a model's output layer (float16 head)."""
    if layer.get("rule"):
        return layer["rule"]
    if layer.get("output_of"):
        return "MP205"
    return None


def _scale_trend(run: RunResult) -> Verdict | None:
    for optimizer in run.optimizers:
        updates = [s for s in run.of(optimizer) if s.dynamic]
        warm = 0
        while warm < len(updates) and updates[warm].skipped:
            warm += 1
        after = updates[warm:]
        if len(after) < 2 * TAIL_MIN:
            continue
        half = len(after) // 2
        first, second = sum(s.skipped for s in after[:half]), sum(s.skipped for s in after[half:])
        start, last = after[0].loss_scale, after[-1].loss_scale
        if (
            first + second >= SCALE_TREND_MIN_SKIPS
            and second > first
            and start and last is not None
            and last * SCALE_TREND_FALL <= start
        ):
            skipped = [s.step for s in after if s.skipped]
            which = f" (optimizer #{optimizer})" if len(run.optimizers) > 1 else ""
            return Verdict(
                "at-risk",
                f"the loss scale{which} keeps falling ({_fmt_scale(start)} -> {_fmt_scale(last)} after the "
                f"warm-up) with more and more skipped steps ({first} in the first half, {second} in the "
                "second): float16 values are growing towards overflow",
                {
                    "kind": "loss-scale",
                    "optimizer": optimizer,
                    "scale_after_warmup": start,
                    "last_scale": last,
                    "skipped_first_half": first,
                    "skipped_second_half": second,
                    "skipped_steps": skipped,
                },
            )
    return None


def _steps(run: RunResult) -> str:
    text = f"{run.step_count} steps"
    if len(run.optimizers) > 1:
        text += f" ({len(run.optimizers)} optimizers, {len(run.steps)} updates)"
    return text


def _usable(baseline: RunResult) -> bool:
    return bool(baseline.steps) and not baseline.timed_out and first_nonfinite(baseline) is None


def _crashed(run: RunResult, script: Path, notes: list[str]) -> Verdict:
    summary, evidence = crash_report(run, script, _steps(run))
    return Verdict("crashed", summary, evidence, notes)


def _stalled(run: RunResult, baseline: RunResult | None, notes: list[str], baseline_expected: bool = True) -> Verdict | None:
    # Skips and scales are counted per update (several per step with several optimizers).
    steps = run.steps
    half = steps[len(steps) // 2 :]
    skipped = sum(s.skipped for s in steps)
    scales = [s.loss_scale for s in steps if s.loss_scale is not None]
    unit = "steps" if len(run.optimizers) <= 1 else "updates"
    evidence = {
        "steps": run.step_count,
        "skipped": skipped,
        "skipped_steps": run.skipped_steps,
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
            which = f" (optimizer #{optimizer})" if len(run.optimizers) > 1 else ""
            if not base:
                # A converged run is flat too: without float32 to compare, say so and
                # judge nothing.
                notes.append(
                    f"the loss{which} is constant at {_fmt(losses[-1])} for {len(losses)} steps; "
                    + ("with no float32 baseline (--no-baseline) " if not baseline_expected else "with no usable float32 baseline ")
                    + "a converged run cannot be told from a stalled one"
                )
                continue
            if not (len(base) >= STALL_FROZEN_MIN_STEPS and _frozen(base)):
                beside = f" while float32 moves {_fmt(base[0])} -> {_fmt(base[-1])}"
                evidence["loss"] = losses[-1]
                return Verdict(
                    "stalled", f"loss{which} frozen at {_fmt(losses[-1])} for {len(losses)} steps{beside}", evidence
                )
    return None
def _frozen(losses: list[float]) -> bool:
    hi, lo = max(losses), min(losses)
    return hi - lo <= STALL_FROZEN_RTOL * max(abs(hi), abs(lo), 1e-30)
