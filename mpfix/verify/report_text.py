"""Parent side: the terminal summary of a verify run."""

from __future__ import annotations

import math
from pathlib import Path

from mpfix.verify import metric_judge
from mpfix.verify.records import RunResult
from mpfix.verify.verdict import _fmt, _ranges
from mpfix.verify.workers_judge import worker_lines

MAX_TRAJECTORY = 8
MAX_FINDINGS = 6


def runtime_findings(report) -> list:
    from mpfix.verify.evidence import for_report

    try:
        return for_report(report)
    except Exception:  # evidence must never hide the verdict
        return []


def scale_trajectory(run: RunResult, optimizer: int | None = None) -> str:
    """Distinct consecutive loss-scale values, e.g. '32768 -> 16384 -> ... -> 1' (of one
    optimizer: each loss scale optimizer has its own scale)."""
    values: list[float] = []
    if optimizer is None:
        optimizer = run.optimizers[0] if run.steps else 0
    for s in run.of(optimizer):
        if s.loss_scale is not None and (not values or values[-1] != s.loss_scale):
            values.append(s.loss_scale)
    if len(values) > MAX_TRAJECTORY:
        values = values[: MAX_TRAJECTORY // 2] + [None] + values[-MAX_TRAJECTORY // 2 :]
    return " -> ".join("..." if v is None else f"{v:.10g}" for v in values) or "n/a"


def _losses(run: RunResult, optimizer: int) -> str:
    losses = [s.loss for s in run.of(optimizer) if s.loss is not None]
    return f"{_fmt(losses[0])} -> {_fmt(losses[-1])}" if losses else ""


def _measures(run: RunResult) -> str:
    """``  loss a -> b  skipped n (steps)  zero-grad x%`` of ``run`` (its first optimizer's loss)."""
    zeros = [s.zero_fraction for s in run.steps]
    skipped = sum(s.skipped for s in run.steps)
    optimizers = run.optimizers
    text = ""
    if optimizers and _losses(run, optimizers[0]):
        text += f"  loss {_losses(run, optimizers[0])}"
    text += f"  skipped {skipped}"
    if skipped:
        text += f" ({_ranges(run.skipped_steps, 4)})"
    if zeros:
        text += f"  zero-grad {sum(zeros) / len(zeros):.1%}"
    return text


def run_lines(label: str, run: RunResult, script: Path) -> list[str]:
    """The run's summary lines; with ``verify --workers`` one more line per worker (its steps, how it
    ended, where a halted one was: ``workers_judge.worker_lines``; ``script`` places that)."""
    optimizers = run.optimizers
    line = f"  {label:<8} steps {run.step_count:>4}"
    if len(optimizers) > 1:
        line += f" ({len(run.steps)} updates by {len(optimizers)} optimizers)"
    line += _measures(run)
    lines = [line]
    lines.append(f"  {'':<8} loss scale {scale_trajectory(run)}")
    for optimizer in optimizers[1:]:
        lines.append(
            f"  {'':<8} optimizer #{optimizer}: loss {_losses(run, optimizer) or 'n/a'}"
            f"  loss scale {scale_trajectory(run, optimizer)}"
        )
    peak = headroom_line(run)
    if peak:
        lines.append(f"  {'':<8} {peak}")
    metrics = metric_judge.run_line(run)
    if metrics:
        lines.append(f"  {'':<8} {metrics}")
    if run.device:
        lines[0] += f"  [{run.device}]"
    if run.errors:
        lines.append(f"  {'':<8} hook errors: " + "; ".join(e.get("error", e.get("message", "")) for e in run.errors))
    for status, worker in zip(worker_lines(run, script), run.workers):
        lines.append(f"  {'':<8} {status}{_measures(worker)}")
    return lines


def headroom_line(run: RunResult) -> str | None:
    """The largest float16 layer output of the run, and how close it is to 65504."""
    measured = [s for s in run.steps if s.act_max is not None]
    if not measured:
        return None
    top = max(measured, key=lambda s: s.act_max if math.isfinite(s.act_max) else math.inf)
    layer = run.layers.get(top.act_layer, {}).get("name") or f"#{top.act_layer}"
    if not math.isfinite(top.act_max):
        return f"float16 headroom: a float16 output was NaN/Inf (layer {layer}, step {top.step})"
    return (
        f"float16 headroom: max |output| {_fmt(top.act_max)} ({top.act_max / 65504.0:.2%} of 65504), "
        f"layer {layer}, step {top.step}"
    )


def render(report, title: str | None = None) -> str:
    v = report.verdict
    out = []
    if title:
        out.append(title)
    out.append(f"{report.script.name}: {v.name.upper()} (exit {v.exit_code}) - {v.summary}")
    out.extend(run_lines("mixed", report.mixed, report.script))
    if report.baseline is not None:
        out.extend(run_lines("float32", report.baseline, report.script))
    device = report.mixed.device
    if device and report.options.device == "auto":
        out.append(f"  device: {device} (auto)")
    for note in v.notes:
        out.append(f"  note: {note}")
    tail = v.evidence.get("stderr_tail") if v.name == "crashed" else None
    if tail:
        out.append("  last lines of the script's stderr:")
        out.extend(f"    | {line[:200]}" for line in tail)
    found = runtime_findings(report) + metric_judge.findings(report)
    if found:
        out.append("  runtime findings (float16 ops of the traced step):")
        out.extend(f"    {f.text(report.script.parent)}" for f in found[:MAX_FINDINGS])
        if len(found) > MAX_FINDINGS:
            out.append(f"    ... {len(found) - MAX_FINDINGS} more in --json")
    if report.location is not None:
        loc = report.location
        text = f"  first NaN/Inf: {loc.where}"
        if loc.op:
            text += f" (op {loc.op})"
        if loc.rule:
            text += f" - {loc.rule}"
            if loc.rule_message:
                text += f": {loc.rule_message}"
        out.append(text)
    if report.escalation:
        out.append("  if the static fixes did not help:")
        out.extend("    - " + line.replace("\n", "\n      ") for line in report.escalation)
    return "\n".join(out)


def render_before_after(pair) -> str:
    return "\n\n".join(
        [
            render(pair.before, "before (original)"),
            render(pair.after, "after (patched)"),
            f"verdict: {pair.before.verdict.name} -> {pair.after.verdict.name}",
        ]
    )
