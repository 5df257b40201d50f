"""Parent side: the HTML plot of the evidence behind a verdict, and what made a report.

* ``underflow``: the share of exactly-zero gradient entries per step, mixed beside
  float32, with the verdict's threshold (50 %);
* ``at-risk`` from float16 headroom: the largest float16 output ``|value|`` per step, with
  the at-risk threshold (1/8 of 65504) and 65504 itself, on a log axis (an ``at-risk`` from a
  falling loss scale rests on the loss-scale plot every report has).

``metadata()``: mpfix's version, the date and the command line, for the JSON and HTML
reports (a report read later says what produced it).
"""

from __future__ import annotations

import html
import math
import sys
from datetime import datetime, timezone

from mpfix import __version__

FLOAT16_MAX = 65504.0
# verdict.py: underflow when the median zero share reaches this (beside a float32 that does not).
UNDERFLOW_SHARE = 0.5


def metadata(argv: list[str] | None = None) -> dict:
    return {
        "mpfix_version": __version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(argv if argv is not None else sys.argv),
    }


def metadata_html(meta: dict | None = None) -> str:
    meta = meta or metadata()
    return (
        f'<p class="meta"><small>mpfix {html.escape(meta["mpfix_version"])}, {html.escape(meta["date"])}: '
        f'<code>{html.escape(meta["command"])}</code></small></p>'
    )


def _points(run, attr: str):
    points = []
    for s in run.steps:
        value = getattr(s, attr)
        if value is None:
            continue
        points.append((s.step, value if math.isfinite(value) else None))
    return points


def _line(label: str, steps, value: float, colour: str) -> dict:
    return {"label": label, "points": [(steps[0], value), (steps[-1], value)], "colour": colour, "dashed": True,
            "width": 1.0, "css": "threshold"}


def evidence_plots(report, colours: dict) -> list[tuple[str, list[dict], str, str]]:
    """(title, series, y label, axis scale) of each plot the verdict rests on; a series is
    the keyword arguments of ``report_html.Series``."""
    runs = {"mixed": report.mixed}
    if report.baseline is not None:
        runs["float32"] = report.baseline
    steps = sorted({s.step for run in runs.values() for s in run.steps})
    if not steps:
        return []
    out = []
    if report.verdict.name == "underflow":
        series = [{"label": label, "points": [(x, None if v is None else 100.0 * v)
                                              for x, v in _points(run, "zero_fraction")],
                   "colour": colours.get(label, "#333"), "css": f"series-{label}"} for label, run in runs.items()]
        series.append(_line("underflow threshold 50%", steps, 100.0 * UNDERFLOW_SHARE, "#868e96"))
        out.append(("Exactly-zero gradient entries per step (%)", series, "% zero", "linear"))
    headroom = [(label, _points(run, "act_max")) for label, run in runs.items()]
    headroom = [(label, points) for label, points in headroom if points]
    # at-risk from a falling loss scale rests on the loss-scale plot, shown for every verdict.
    if headroom and report.verdict.name == "at-risk" and report.verdict.evidence.get("kind") == "headroom":
        from mpfix.verify.verdict import HEADROOM_FRACTION

        series = [{"label": label, "points": points, "colour": colours.get(label, "#333"), "css": f"series-{label}"}
                  for label, points in headroom]
        series.append(_line(f"at-risk {HEADROOM_FRACTION * FLOAT16_MAX:g}", steps, HEADROOM_FRACTION * FLOAT16_MAX,
                            "#e67700"))
        series.append(_line("float16 max 65504", steps, FLOAT16_MAX, "#c92a2a"))
        out.append(("Largest float16 output |value| per step (headroom)", series, "|value|", "log10"))
    return out
