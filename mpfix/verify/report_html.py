"""Parent side: the ``--html`` report, one self-contained file (inline CSS and SVG, no
scripts, no external assets): verdict, evidence, and plots of the loss and the loss scale
per step, mixed beside float32.

Plots: the loss on a linear axis, or a log10 axis when every value is positive and they
span two decades or more (a run that plateaus at 0.3 beside one that reaches 1e-6 is
otherwise two flat lines on the floor); the loss scale on a log2 axis labelled with the
scale itself (32768, 1024, 1, ...). One line per run and optimizer (GAN-style scripts:
dashed for the second optimizer on); non-finite values are red crosses on the top edge.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path

from mpfix.verify import report_text
from mpfix.verify.report_evidence import evidence_plots, metadata_html

WIDTH, HEIGHT = 640, 260
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 44, 44
COLOURS = {"mixed": "#d9480f", "float32": "#1c7ed6"}
NONFINITE = "#c92a2a"
# The loss gets a log axis when positive and max/min reaches this.
LOG_RATIO = 100.0
# A linear axis whose values all agree to this relative spread is near-constant: it is
# drawn flat in the middle of a range of +-NEAR_CONSTANT_PAD of the value (float noise of
# 1e-10 would otherwise fill the plot as a steep fall).
NEAR_CONSTANT_REL = 1e-3
NEAR_CONSTANT_PAD = 0.05


@dataclass
class Series:
    label: str
    points: list  # (step, value or None for non-finite)
    colour: str
    dashed: bool = False
    css: str = ""
    width: float = 2.0
    marks: list = None  # (step, value) of updates the loss scaler skipped


def _series(run, attr: str, optimizer: int | None = None) -> list[tuple[int, float | None]]:
    """(step, value) of one optimizer's updates (the first optimizer when None); missing
    values (a step without a fresh loss) are left out, non-finite ones are None."""
    if optimizer is None:
        optimizer = run.optimizers[0] if run.steps else 0
    points = []
    for s in run.of(optimizer):
        value = getattr(s, attr)
        if value is None:
            continue
        points.append((s.step, value if math.isfinite(value) else None))
    return points


def _nice_step(span: float, count: int = 5) -> float:
    raw = span / max(count, 1)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if m * power >= raw:
            return m * power
    return 10 * power


def _linear_ticks(lo: float, hi: float) -> list[float]:
    step = _nice_step(hi - lo)
    first = math.ceil(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{v:.4g}"


def _tick_labels(ticks: list[float]) -> list[str]:
    """Labels that tell the ticks apart: the shortest precision giving distinct labels."""
    if len(ticks) <= 1:
        return [_fmt_tick(t) for t in ticks]
    labels = [_fmt_tick(t) for t in ticks]
    if len(set(labels)) == len(labels):
        return labels
    for digits in range(2, 13):
        labels = [("0" if t == 0 else f"{t:.{digits}g}") for t in ticks]
        if len(set(labels)) == len(labels):
            return labels
    return labels


def _fmt_power(base: int, k: int) -> str:
    """A tick of a log axis: 32768, 1, 1/1024 (base 2); 100, 1, 1e-4 (base 10)."""
    if base == 2:
        return str(2**k) if k >= 0 else f"1/{2 ** -k}"
    return _fmt_tick(10.0**k)


def svg_plot(title: str, series, y_label: str, scale: str = "auto") -> str:
    """A line chart. ``series``: a list of ``Series`` (or a dict label -> points, the
    older form); ``scale``: "linear", "log10", "log2" (values are drawn on that axis and
    labelled with the values themselves), or "auto" (log10 for a positive series spanning
    LOG_RATIO or more, else linear)."""
    if isinstance(series, dict):
        series = [Series(k, v, COLOURS.get(k, "#333"), css=f"series-{k}") for k, v in series.items()]
    finite = [v for s in series for _, v in s.points if v is not None]
    steps = [x for s in series for x, _ in s.points]
    if scale == "auto":
        positive = finite and min(finite) > 0
        scale = "log10" if positive and max(finite) / min(finite) >= LOG_RATIO else "linear"
    if scale != "linear" and finite and min(finite) <= 0:
        scale = "linear"
    transform = {"linear": lambda v: v, "log10": math.log10, "log2": math.log2}[scale]

    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{html.escape(title)}" '
        f'font-family="sans-serif" data-scale="{scale}">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>',
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    if not steps:
        parts.append(f'<text x="{LEFT}" y="{HEIGHT // 2}" font-size="12">no steps recorded</text></svg>')
        return "".join(parts)

    x0, x1 = min(steps), max(max(steps), min(steps) + 1)
    ys = [transform(v) for v in finite] or [0.0, 1.0]
    y0, y1 = min(ys), max(ys)
    near_constant = scale == "linear" and y1 - y0 <= NEAR_CONSTANT_REL * max(abs(y0), abs(y1))
    if near_constant:
        middle = (y0 + y1) / 2
        half = abs(middle) * NEAR_CONSTANT_PAD or 0.5
        y0, y1 = middle - half, middle + half
    else:
        if y1 - y0 < 1e-12:
            y0, y1 = y0 - 0.5, y1 + 0.5
        pad = (y1 - y0) * 0.06
        y0, y1 = y0 - pad, y1 + pad

    def px(x):
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y):
        return TOP + plot_h - (y - y0) / (y1 - y0) * plot_h

    # Grid and y ticks, labelled with the values themselves.
    if scale == "linear":
        values = _linear_ticks(y0, y1)
        ticks = list(zip(values, _tick_labels(values)))
    else:
        base = 10 if scale == "log10" else 2
        lo, hi = math.ceil(y0), math.floor(y1)
        every = max(1, math.ceil((hi - lo + 1) / 6))
        ticks = [(float(k), _fmt_power(base, k)) for k in range(lo, hi + 1) if k % every == 0]
    for t, label in ticks:
        y = py(t)
        parts.append(
            f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#e9ecef"/>'
            f'<text class="ytick" x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{label}</text>'
        )
    for t in _linear_ticks(x0, x1):
        if t != int(t):
            continue
        x = px(t)
        parts.append(
            f'<line x1="{x:.1f}" y1="{TOP + plot_h}" x2="{x:.1f}" y2="{TOP + plot_h + 4}" stroke="#868e96"/>'
            f'<text class="xtick" x="{x:.1f}" y="{TOP + plot_h + 17}" font-size="11" text-anchor="middle">{int(t)}</text>'
        )
    if near_constant:
        parts.append(
            f'<text class="note" x="{LEFT + 8}" y="{TOP + 14}" font-size="11" fill="#495057">'
            f"constant to {NEAR_CONSTANT_REL:g} relative</text>"
        )
    # Axes and their titles.
    axis_note = {"linear": "", "log10": " (log scale)", "log2": " (log scale)"}[scale]
    parts.append(
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#868e96"/>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#868e96"/>'
        f'<text class="xlabel" x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" font-size="12" '
        f'text-anchor="middle">step</text>'
        f'<text class="ylabel" x="14" y="{TOP + plot_h / 2:.1f}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.1f})">{html.escape(y_label + axis_note)}</text>'
    )

    any_nonfinite = any_skipped = False
    for s in series:
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        coords = " ".join(f"{px(x):.1f},{py(transform(v)):.1f}" for x, v in s.points if v is not None)
        if coords:
            parts.append(
                f'<polyline class="{html.escape(s.css)}" fill="none" stroke="{s.colour}" '
                f'stroke-width="{s.width:g}"{dash} points="{coords}"/>'
            )
        for x, v in s.marks or ():
            any_skipped = True
            parts.append(
                f'<circle class="skipped" cx="{px(x):.1f}" cy="{py(transform(v)):.1f}" r="4" fill="#fff" '
                f'stroke="{s.colour}" stroke-width="1.5"/>'
            )
            if len([1 for _, v in s.points if v is not None]) == 1:
                x, v = next(p for p in s.points if p[1] is not None)
                parts.append(f'<circle cx="{px(x):.1f}" cy="{py(transform(v)):.1f}" r="3" fill="{s.colour}"/>')
        for x, v in s.points:
            if v is None:
                any_nonfinite = True
                cx = px(x)
                parts.append(
                    f'<path class="nonfinite" d="M{cx - 4:.1f},{TOP - 4:.1f}l8,8m0,-8l-8,8" '
                    f'stroke="{NONFINITE}" stroke-width="2"/>'
                )

    # Legend: a short line sample per series, right-aligned in the title row.
    entries = [(s.label, s.colour, s.dashed, "line") for s in series]
    if any_skipped:
        entries.append(("skipped", "#495057", False, "circle"))
    if any_nonfinite:
        entries.append(("NaN/Inf", NONFINITE, False, "cross"))
    x = WIDTH - RIGHT
    for label, colour, dashed, kind in reversed(entries):
        width = 30 + 7 * len(label)
        x -= width
        if kind == "line":
            dash = ' stroke-dasharray="6 4"' if dashed else ""
            sample = f'<line x1="{x}" y1="{30}" x2="{x + 20}" y2="{30}" stroke="{colour}" stroke-width="2"{dash}/>'
        elif kind == "circle":
            sample = f'<circle cx="{x + 10}" cy="{30}" r="4" fill="#fff" stroke="{colour}" stroke-width="1.5"/>'
        else:
            sample = f'<path d="M{x + 6},{26}l8,8m0,-8l-8,8" stroke="{colour}" stroke-width="2"/>'
        parts.append(
            f'<g class="legend">{sample}<text x="{x + 24}" y="{34}" font-size="11">{html.escape(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _runs(report) -> dict:
    runs = {"mixed": report.mixed}
    if report.baseline is not None:
        runs["float32"] = report.baseline
    return runs


def _all_series(runs: dict, attr: str) -> list[Series]:
    """One series per run and optimizer. The first run (mixed) is drawn wider, under the
    others, so it stays visible where float32 coincides with it."""
    out = []
    for index, (label, run) in enumerate(runs.items()):
        optimizers = run.optimizers or [0]
        for rank, optimizer in enumerate(optimizers):
            name = label if len(optimizers) == 1 else f"{label} #{optimizer}"
            marks = None
            if attr == "loss_scale":
                marks = [
                    (s.step, s.loss_scale)
                    for s in run.of(optimizer)
                    if s.skipped and s.loss_scale is not None and math.isfinite(s.loss_scale)
                ]
            out.append(
                Series(
                    name,
                    _series(run, attr, optimizer),
                    COLOURS.get(label, "#333"),
                    dashed=rank > 0,
                    css=f"series-{label}" + (f" optimizer-{optimizer}" if len(optimizers) > 1 else ""),
                    width=4.0 if index == 0 and len(runs) > 1 else 2.0,
                    marks=marks,
                )
            )
    return out


def evidence_plot(report) -> str:
    """The plots of what the verdict rests on (report_evidence.py): the zero-gradient share
    for underflow, the float16 headroom for an at-risk layer."""
    return "".join(svg_plot(title, [Series(**spec) for spec in series], label, scale=scale)
                   for title, series, label, scale in evidence_plots(report, COLOURS))


def section(report, heading: str | None = None) -> str:
    v = report.verdict
    runs = _runs(report)
    loss_plot = svg_plot("Loss per step", _all_series(runs, "loss"), "loss")
    scale_plot = svg_plot("Loss scale per step", _all_series(runs, "loss_scale"), "loss scale", scale="log2")
    summary = html.escape("\n".join(line for name, run in runs.items() for line in report_text.run_lines(name, run, report.script)))
    extra = ""
    if report.location is not None:
        loc = report.location
        extra += f"<p><b>First NaN/Inf:</b> {html.escape(loc.where)}"
        if loc.op:
            extra += f" (op <code>{html.escape(loc.op)}</code>)"
        if loc.rule:
            extra += f" &mdash; <code>{html.escape(loc.rule)}</code>"
        extra += "</p>"
    found = report_text.runtime_findings(report)
    if found:
        extra += ('<h3>Runtime findings (float16 ops of the traced step)</h3><pre class="findings">'
                  + html.escape("\n".join(f.text(report.script.parent) for f in found)) + "</pre>")
    if v.notes:
        extra += "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in v.notes) + "</ul>"
    if report.escalation:
        extra += (
            "<h3>If the static fixes did not help</h3><ul>"
            + "".join(f"<li><pre>{html.escape(e)}</pre></li>" for e in report.escalation)
            + "</ul>"
        )
    title = f"<h2>{html.escape(heading)}</h2>" if heading else ""
    return (
        f'<section>{title}<p class="verdict verdict-{v.name}"><b>{html.escape(v.name.upper())}</b> '
        f"(exit {v.exit_code}) &mdash; {html.escape(v.summary)}</p>"
        f'<p class="script">{html.escape(str(report.script))}</p><pre class="runs">{summary}</pre>{extra}'
        f'<div class="plots">{loss_plot}{scale_plot}{evidence_plot(report)}</div></section>'
    )


STYLE = (
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1320px}"
    "pre{margin:0;white-space:pre-wrap}.runs{background:#f8f9fa;padding:8px;border-radius:4px}"
    ".verdict{font-size:18px}.script{color:#555}"
    # Red for every bad verdict, then green for healthy (same specificity: order decides).
    ".verdict b{color:#c92a2a}.verdict-at-risk b{color:#e67700}.verdict-healthy b{color:#2b8a3e}"
    # The combined before -> after line colours each side by its own verdict.
    ".combined .before b{color:#c92a2a}.combined .before.verdict-at-risk b{color:#e67700}"
    ".combined .before.verdict-healthy b{color:#2b8a3e}.combined{font-size:20px}"
    ".plots{display:flex;flex-wrap:wrap;gap:8px;margin-top:12px}.plots svg{border:1px solid #dee2e6}"
)


def render(report_or_pair) -> str:
    if hasattr(report_or_pair, "before"):
        before, after = report_or_pair.before.verdict, report_or_pair.after.verdict
        combined = (
            f'<p class="verdict combined verdict-{after.name}">verdict: '
            f'<span class="before verdict-{before.name}"><b>{html.escape(before.name)}</b></span> &rarr; '
            f"<b>{html.escape(after.name)}</b> (exit {report_or_pair.exit_code})</p>"
        )
        body = (
            combined
            + section(report_or_pair.before, "before (original)")
            + section(report_or_pair.after, "after (patched)")
        )
        name = report_or_pair.after.script.name
    else:
        body = section(report_or_pair)
        name = report_or_pair.script.name
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>mpfix verify: {html.escape(name)}</title><style>{STYLE}</style></head>"
        f"<body><h1>mpfix verify</h1>{metadata_html()}{body}</body></html>\n"
    )


def write(report_or_pair, path: Path) -> None:
    Path(path).write_text(render(report_or_pair), encoding="utf-8")
