"""Parent side: what ``mpfix repair`` prints and writes (text, ``--json``, ``--html``)."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from mpfix.verify.report_evidence import metadata, metadata_html
from mpfix.verify.report_json import clean


def _rel(path, root: Path) -> str:
    """``path`` below ``root`` as printed (control characters escaped: ``mpfix.display.printable``)."""
    import os

    from mpfix.display import printable

    try:
        return printable(os.path.relpath(path, root))
    except ValueError:
        return printable(str(path))


def diff(result, root: Path | None = None) -> str:
    from mpfix.cli import unified_diff

    root = root or Path.cwd()
    return "".join(unified_diff(_rel(p, root), old, new) for p, (old, new) in sorted(result.texts.items()))


def _final_loss(run) -> str:
    if run is None:
        return "n/a"
    losses = run.losses_of(run.optimizers[0]) if run.steps else []
    if not losses:
        return "n/a"
    return f"{losses[-1]:.4g}"


def render(result, root: Path | None = None, show_diff: bool = True) -> str:
    root = root or Path.cwd()
    name = result.script.name
    before, after = result.before.verdict, result.after.verdict
    out = [f"{name}: {before.name} -> {after.name} (exit {result.exit_code})"]
    out.append(f"  before: {before.summary}")
    if after is not before:
        out.append(f"  after:  {after.summary}")
    out.append(f"  final loss: mixed {_final_loss(result.before.run)} -> {_final_loss(result.after.run)}, "
               f"float32 {_final_loss(result.baseline)}")
    if result.findings:
        out.append("  runtime findings of the script as it was:")
        out.extend(f"    {f.text(root)}" for f in result.findings[:6])
    if result.changes:
        out.append("  changes kept:")
        for change in result.changes:
            out.append(f"    - {_rel(change.path, root)}: {change.kind}: {change.description} -> {change.verdict}")
            out.append(f"      evidence: {change.evidence}")
    rejected = [t for t in result.trials if not t.kept]
    if rejected:
        out.append("  tried and not kept:")
        for trial in rejected:
            out.append(f"    - {_rel(trial.change.path, root)}: {trial.change.kind}: {trial.change.description}: "
                       f"{trial.verdict} ({trial.reason})")
    for note in result.notes:
        out.append(f"  note: {note}")
    for error in result.errors:
        out.append(f"  error: {error}")
    out.append(f"  {result.runs} runs in {result.elapsed:.1f} s")
    text = "\n".join(out)
    if show_diff and result.texts:
        text = diff(result, root) + text
    return text


def report_dict(result, root: Path | None = None) -> dict:
    from mpfix.verify.records import json_number

    def run_summary(run):
        if run is None:
            return None
        losses = run.losses_of(run.optimizers[0]) if run.steps else []
        return {"steps": run.step_count, "final_loss": json_number(losses[-1]) if losses else None,
                "skipped": len(run.skipped_steps)}

    return {
        "version": 1,
        **metadata(),
        "script": str(result.script),
        "verdict": {"before": result.before.verdict.to_json(), "after": result.after.verdict.to_json()},
        "exit_code": result.exit_code,
        "runs": {"mixed_before": run_summary(result.before.run), "mixed_after": run_summary(result.after.run),
                 "float32": run_summary(result.baseline)},
        "findings": [f.to_json() for f in result.findings],
        "changes": [c.to_json() for c in result.changes],
        "trials": [t.to_json() for t in result.trials],
        "diff": diff(result, root),
        "written": [str(p) for p in result.written],
        "notes": result.notes,
        "errors": result.errors,
        "elapsed_s": round(result.elapsed, 2),
        "child_runs": result.runs,
    }


def write_json(result, path) -> None:
    Path(path).write_text(json.dumps(clean(report_dict(result)), indent=2, allow_nan=False) + "\n", encoding="utf-8")


def write_html(result, path) -> None:
    """One self-contained page: verdict before -> after, the changes with their evidence,
    the diff, and the loss of the mixed run before and after beside float32's."""
    from mpfix.verify.report_html import Series, _series, svg_plot

    meta = metadata()
    series = [Series("float32", _series(result.baseline, "loss"), "#555", dashed=True)] if result.baseline else []
    series.append(Series("mixed, before", _series(result.before.run, "loss"), "#c0392b"))
    if result.after is not result.before:
        series.append(Series("mixed, after", _series(result.after.run, "loss"), "#1e8449"))
    items = "".join(
        f"<li><code>{html.escape(str(c.path.name))}</code>: {html.escape(str(c.kind))}: {html.escape(c.description)}"
        f" &rarr; {html.escape(c.verdict)}<br><small>evidence: {html.escape(c.evidence)}</small></li>"
        for c in result.changes)
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>mpfix repair {html.escape(result.script.name)}</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}pre{{background:#f6f6f6;padding:1em;overflow:auto}}</style>
</head><body><h1>mpfix repair: {html.escape(result.script.name)}</h1>
<p><b>{html.escape(result.before.verdict.name)} &rarr; {html.escape(result.after.verdict.name)}</b>
(exit {result.exit_code})</p>
{metadata_html(meta)}
<h2>Changes</h2><ul>{items or '<li>none</li>'}</ul>
<pre>{html.escape(diff(result)) or 'no diff'}</pre>
{svg_plot('loss', series, 'loss')}
</body></html>
"""
    Path(path).write_text(body, encoding="utf-8")


def finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
