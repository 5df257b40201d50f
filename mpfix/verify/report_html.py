"""Parent side: the ``--html`` report, one self-contained file (inline CSS and SVG, no
scripts, no external assets): verdict, evidence, and plots of the loss and the loss scale
per step, mixed beside float32."""

from __future__ import annotations

import html
import math
from pathlib import Path

from mpfix.verify import report_text

WIDTH, HEIGHT, PAD = 640, 240, 48
COLOURS = {"mixed": "#d9480f", "float32": "#1c7ed6"}


def _series(run, attr: str, log2: bool = False) -> list[tuple[int, float | None]]:
    points = []
    for s in run.steps:
        value = getattr(s, attr)
        if value is not None and math.isfinite(value) and log2:
            value = math.log2(value) if value > 0 else None
        points.append((s.step, value if value is None or math.isfinite(value) else None))
    return points


def svg_plot(title: str, series: dict, y_label: str) -> str:
    """A line chart; non-finite or missing values are drawn as red crosses on the top
    edge so a NaN step is visible, not silently dropped."""
    finite = [v for pts in series.values() for _, v in pts if v is not None]
    steps = [x for pts in series.values() for x, _ in pts]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{html.escape(title)}">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>',
        f'<text x="{PAD}" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>',
    ]
    if not steps:
        parts.append(f'<text x="{PAD}" y="{HEIGHT // 2}" font-size="12">no steps recorded</text></svg>')
        return "".join(parts)
    x0, x1 = min(steps), max(max(steps), min(steps) + 1)
    y0, y1 = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def px(x):
        return PAD + (x - x0) / (x1 - x0) * (WIDTH - 2 * PAD)

    def py(y):
        return HEIGHT - PAD + 8 - (y - y0) / (y1 - y0) * (HEIGHT - 2 * PAD)

    top = py(y1)
    parts.append(
        f'<line x1="{PAD}" y1="{HEIGHT - PAD + 8}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD + 8}" stroke="#888"/>'
        f'<line x1="{PAD}" y1="{top}" x2="{PAD}" y2="{HEIGHT - PAD + 8}" stroke="#888"/>'
        f'<text x="4" y="{top + 4:.1f}" font-size="10">{y1:.4g}</text>'
        f'<text x="4" y="{HEIGHT - PAD + 8:.1f}" font-size="10">{y0:.4g}</text>'
        f'<text x="{PAD}" y="{HEIGHT - 8}" font-size="10">step {x0}</text>'
        f'<text x="{WIDTH - PAD - 40}" y="{HEIGHT - 8}" font-size="10">step {x1}</text>'
        f'<text x="{WIDTH // 2 - 30}" y="{HEIGHT - 8}" font-size="10">{html.escape(y_label)}</text>'
    )
    legend_y = 16
    for name, pts in series.items():
        colour = COLOURS.get(name, "#333")
        coords = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in pts if v is not None)
        if coords:
            parts.append(f'<polyline class="series-{name}" fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>')
        for x, v in pts:
            if v is None:
                cx = px(x)
                parts.append(
                    f'<path class="nonfinite" d="M{cx - 4:.1f},{top - 4:.1f}l8,8m0,-8l-8,8" stroke="#c92a2a" stroke-width="2"/>'
                )
        parts.append(
            f'<text x="{WIDTH - PAD - 90}" y="{legend_y}" font-size="11" fill="{colour}">&#9632; {html.escape(name)}</text>'
        )
        legend_y += 14
    parts.append("</svg>")
    return "".join(parts)


def _runs(report) -> dict:
    runs = {"mixed": report.mixed}
    if report.baseline is not None:
        runs["float32"] = report.baseline
    return runs


def section(report, heading: str | None = None) -> str:
    v = report.verdict
    runs = _runs(report)
    loss_plot = svg_plot("loss per step", {k: _series(r, "loss") for k, r in runs.items()}, "loss")
    scale_plot = svg_plot(
        "loss scale per step (log2)", {k: _series(r, "loss_scale", log2=True) for k, r in runs.items()}, "log2(scale)"
    )
    rows = "".join(
        f"<tr><th>{html.escape(name)}</th><td><pre>{html.escape(chr(10).join(report_text.run_lines(name, run)))}</pre></td></tr>"
        for name, run in runs.items()
    )
    extra = ""
    if report.location is not None:
        loc = report.location
        extra += f"<p><b>First NaN/Inf:</b> {html.escape(loc.where)}"
        if loc.op:
            extra += f" (op <code>{html.escape(loc.op)}</code>)"
        if loc.rule:
            extra += f" &mdash; <code>{html.escape(loc.rule)}</code>"
        extra += "</p>"
    if v.notes:
        extra += "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in v.notes) + "</ul>"
    if report.escalation:
        extra += "<h3>If the static fixes did not help</h3><ul>" + "".join(
            f"<li><pre>{html.escape(e)}</pre></li>" for e in report.escalation
        ) + "</ul>"
    title = f"<h2>{html.escape(heading)}</h2>" if heading else ""
    return (
        f'<section>{title}<p class="verdict verdict-{v.name}"><b>{html.escape(v.name.upper())}</b> '
        f"(exit {v.exit_code}) &mdash; {html.escape(v.summary)}</p>"
        f"<p>{html.escape(str(report.script))}</p><table>{rows}</table>{extra}"
        f'<div class="plots">{loss_plot}{scale_plot}</div></section>'
    )


STYLE = (
    "body{font-family:sans-serif;margin:24px;color:#222}"
    "table{border-collapse:collapse}th{text-align:left;padding-right:12px}"
    "pre{margin:0;white-space:pre-wrap}.verdict{font-size:18px}"
    ".verdict-healthy b{color:#2b8a3e}.verdict b{color:#c92a2a}"
    ".plots svg{border:1px solid #ddd;margin:8px 8px 0 0}"
)


def render(report_or_pair) -> str:
    if hasattr(report_or_pair, "before"):
        body = section(report_or_pair.before, "before (original)") + section(report_or_pair.after, "after (patched)")
        name = report_or_pair.after.script.name
    else:
        body = section(report_or_pair)
        name = report_or_pair.script.name
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>mpfix verify: {html.escape(name)}</title><style>{STYLE}</style></head>"
        f"<body><h1>mpfix verify</h1>{body}</body></html>\n"
    )


def write(report_or_pair, path: Path) -> None:
    Path(path).write_text(render(report_or_pair), encoding="utf-8")
