"""Parent side: judge a mixed-precision run, beside its float32 baseline when there is one.

Verdicts are checked in this order; the first that applies wins:

timeout, non-finite, crashed, no-steps, stalled, underflow, unstable, at-risk, diverged,
healthy.

(non-finite comes before crashed: a script that crashes after its loss went NaN crashed
because of it.) The thresholds below are documented in docs/verify.md.
"""

from __future__ import annotations

import math
import re
import signal
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from mpfix.verify.frames import describe, is_user_file, last_user_frame
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
    "at-risk": 17,
    "unstable": 18,
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

# unstable: the loss grows: the mean of the tail is at least this multiple of the first
# losses (median of the first three) -- in float32 too (or with no baseline to tell).
GROWTH_FACTOR = 10.0
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
# non-finite: the float32 baseline going non-finite this many steps later or sooner still
# counts as "the same failure".
SAME_FAILURE_STEPS = 1

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


def judge(mixed: RunResult, baseline: RunResult | None, script: Path, baseline_expected: bool | None = None) -> Verdict:
    """``baseline_expected``: whether a baseline was asked for (False: --no-baseline, so
    the rules that need one say so); by default, whether one is given."""
    if baseline_expected is None:
        baseline_expected = baseline is not None
    notes = _baseline_notes(baseline)
    usable = baseline if baseline is not None and _usable(baseline) else None

    if mixed.timed_out:
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
            notes.extend(_nonfinite_baseline_notes(step.step, baseline))
        return Verdict(
            "non-finite",
            f"non-finite {what} at step {step.step} (value {_fmt(value)})",
            evidence,
            notes,
        )

    exit_status = mixed.exit_status
    failed_exit = (mixed.end or {}).get("status") == "exit" and exit_status not in (0, None)
    if mixed.crash is not None or mixed.end is None or (failed_exit and not mixed.steps):
        return _crashed(mixed, script, notes)
    if failed_exit:
        notes.append(f"the script exited with status {exit_status} after {_steps(mixed)}")

    if not mixed.steps:
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
        gap = _grows_alone(mixed, usable)
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


def _first_losses(run: RunResult) -> tuple[float, float] | None:
    losses = run.finite_losses
    if len(losses) < TAIL_MIN + 3:
        return None
    first = statistics.median(losses[:3])
    size = max(TAIL_MIN, math.ceil(len(losses) * TAIL_FRACTION))
    return first, statistics.fmean(losses[-size:])


def _grows(run: RunResult) -> tuple[float, float] | None:
    ends = _first_losses(run)
    if ends is None:
        return None
    first, tail = ends
    return ends if tail > GROWTH_FACTOR * max(abs(first), 1e-30) else None


def _grows_alone(mixed: RunResult, baseline: RunResult) -> dict | None:
    """The mixed loss grows (GROWTH_FACTOR) while float32's does not: diverged, whatever the
    step-by-step z (a geometric blow-up has a spread as large as its mean)."""
    grows = _grows(mixed)
    ends = _first_losses(baseline)
    if grows is None or ends is None or _grows(baseline) is not None:
        return None
    return {
        "grows": True,
        "first_loss": grows[0],
        "final_loss": grows[1],
        "float32_first_loss": ends[0],
        "float32_final_loss": ends[1],
        "relative_difference": abs(grows[1] - ends[1]) / max(abs(grows[1]), abs(ends[1]), 1e-30),
        "optimizer": mixed.optimizers[0],
    }


def _unstable(mixed: RunResult, baseline: RunResult | None, baseline_expected: bool) -> Verdict | None:
    grows = _grows(mixed)
    if grows is None:
        return None
    first, tail = grows
    if baseline is not None:
        base = _grows(baseline)
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


def _float32_run(run: RunResult) -> bool:
    """Whether the baseline really ran in float32 (its global policies, as recorded)."""
    policies = (run.end or {}).get("policies") or {}
    return all(p == "float32" for p in policies.values())


def _nonfinite_baseline_notes(mixed_step: int, baseline: RunResult) -> list[str]:
    bad = first_nonfinite(baseline)
    if bad is None:
        return []
    base_step = bad[0].step
    if not _float32_run(baseline):
        policies = ", ".join(sorted(set(((baseline.end or {}).get("policies") or {}).values())))
        return [
            f"the baseline is non-finite too (from step {base_step}), but it did not run in float32 "
            f"(policy {policies}): no comparison"
        ]
    if base_step <= mixed_step + SAME_FAILURE_STEPS:
        return [f"the float32 baseline is non-finite too (from step {base_step}): the cause is not mixed precision"]
    return [
        f"float32 is non-finite too, but only from step {base_step} (mixed: step {mixed_step}): mixed "
        "precision fails first; the later float32 failure has a cause of its own (data, learning rate)"
    ]


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


# TensorFlow/absl log lines in stderr that say nothing about the script's failure.
_NOISE = re.compile(r"^(?:[IWE]\d{4} \d\d:\d\d:\d\d|WARNING: All log messages before absl|To enable the following instructions)")


def stderr_lines(text: str, count: int = 8) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines() if line.strip() and not _NOISE.match(line)]
    return lines[-count:]


# The message of an error raised inside a tf.function: "in user code:" then the user's
# frames as text, then the error itself; or "Graph execution error:" then the op's
# creation stack and the error, ending in "[[{{node ...}}]] [Op:...]".
_TF_HEADERS = ("in user code:", "Graph execution error:")
_STACK_TEXT = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')


def _message_frames(message: str) -> list[dict]:
    frames, lines = [], message.splitlines()
    for i, line in enumerate(lines):
        m = _STACK_TEXT.match(line)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _STACK_TEXT.match(lines[i + 1]) else ""
            frames.append({"file": m.group(1), "line": int(m.group(2)), "function": m.group(3), "code": code})
    return frames


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning)): (.*)$")


def crash_head(message: str, kind: str | None = None) -> str:
    """The line of an exception message that says what went wrong: the first, unless it is
    one of TensorFlow's headers ("in user code:", "Graph execution error:"), then the error
    line in its text; Keras' "Exception encountered when calling X.call()." is followed by
    the line that says why."""
    lines = [_ANSI.sub("", line).strip() for line in message.strip().splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return ""
    head, index = lines[0], 0
    if head in _TF_HEADERS:
        errors = [i for i, line in enumerate(lines) if _ERROR_LINE.match(line)]
        plain = [
            i
            for i, line in enumerate(lines[1:], start=1)
            if not _STACK_TEXT.match(line)
            and not line.startswith(("[[", "Detected at node", "Stack trace", "Op:", "[Op:"))
            and not line.endswith("(most recent call last):")
        ]
        if errors:
            index = errors[-1]
            match = _ERROR_LINE.match(lines[index])
            head = match.group(2) if kind and match.group(1).split(".")[-1] == kind else lines[index]
        elif plain:
            index = plain[-1]
            head = lines[index]
    if head.startswith("Exception encountered when calling") and index + 1 < len(lines):
        head = f"{head} {lines[index + 1]}"
    return head


def _crashed(run: RunResult, script: Path, notes: list[str]) -> Verdict:
    stderr = stderr_lines(run.stderr_tail)
    if run.crash is not None:
        message = run.crash.get("message", "")
        frames = list(run.crash.get("frames", []))
        # Inside a tf.function the Python traceback ends in TensorFlow; the message holds
        # the user's frames as text.
        text_frames = _message_frames(message)
        frame = None
        for candidate in reversed(text_frames):
            if is_user_file(candidate.get("file", ""), script):
                frame = candidate
                break
        if frame is None:
            frame = last_user_frame(frames, script)
        where = describe(frame, script)
        head = crash_head(message, run.crash.get("type"))
        return Verdict(
            "crashed",
            f"{run.crash.get('type')}: {head} (at {where})",
            {
                "type": run.crash.get("type"),
                "message": message,
                "frame": frame,
                "at": where,
                "exit_status": run.returncode,
                "steps": run.step_count,
                "stderr_tail": stderr,
            },
            notes,
        )
    end = run.end or {}
    if end.get("status") == "exit":
        code = end.get("code")
        frame = last_user_frame(end.get("frames", []), script)
        where = describe(frame, script) if frame else "unknown location"
        why = f": {end['message']}" if end.get("message") else ""
        how = "os._exit" if end.get("abrupt") else "sys.exit"
        summary = f"the script exited with status {code} ({how}{why}) before a single optimizer step"
        if frame:
            summary += f" (at {where})"
        if stderr:
            summary += f"; its last stderr line: {stderr[-1]}"
        return Verdict(
            "crashed",
            summary,
            {"exit_status": code, "frame": frame, "at": where if frame else None, "stderr_tail": stderr, "steps": 0},
            notes,
        )
    summary = f"the child process died without reporting (exit status {run.returncode}"
    if run.returncode is not None and run.returncode < 0:
        try:
            summary += f", killed by {signal.Signals(-run.returncode).name}"
        except ValueError:
            pass
    summary += f") after {_steps(run)}"
    if stderr:
        summary += f"; its last stderr line: {stderr[-1]}"
    return Verdict(
        "crashed",
        summary,
        {"exit_status": run.returncode, "returncode": run.returncode, "stderr_tail": stderr, "steps": run.step_count},
        notes,
    )


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
