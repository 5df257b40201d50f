"""Render results for people (text, full) and tools (json, sarif, github)."""

from __future__ import annotations

from mpfix.display import display_path
from mpfix.output.report import Report, absolute, location_label

__all__ = ["FORMATS", "Report", "absolute", "display_path", "location_label", "render"]

# json: Ruff's bare list of findings; json-run: {"findings": that list, "run": run metadata}.
FORMATS = ("text", "full", "json", "json-run", "sarif", "github")


def render(fmt: str, report: Report) -> str:
    if fmt in ("text", "full"):
        from mpfix.output.text import render as render_text

        return render_text(report, full=fmt == "full")
    if fmt in ("json", "json-run"):
        from mpfix.output.json_format import render as render_json

        return render_json(report, envelope=fmt == "json-run")
    if fmt == "sarif":
        from mpfix.output.sarif import render as render_sarif

        return render_sarif(report)
    if fmt == "github":
        from mpfix.output.github import render as render_github

        return render_github(report)
    raise ValueError(f"unknown format {fmt!r}")
