"""Render results for people (text, full) and tools (json, sarif, github)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from mpfix.findings import FileError, Finding
from mpfix.output.run_notes import Declaration, Unchecked

# json: Ruff's bare list of findings; json-run: {"findings": that list, "run": run metadata}.
FORMATS = ("text", "full", "json", "json-run", "sarif", "github")


@dataclass
class Report:
    """Everything an output format may show."""

    findings: list[Finding]
    errors: list[FileError]
    unsafe_fixes: bool
    texts: dict[str, str]  # filename → source text, for excerpts (full format)
    files_checked: int
    # filename → (Keras generation or None when unknown, why): for --verbose and SARIF's run properties
    targets: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    unchecked: Unchecked | None = None  # files the float16 rules skipped (no mixed policy reaches them)
    declared_unreadable: tuple[Declaration, ...] = ()  # dependency declarations that could not be read


def display_path(filename: str) -> str:
    """Relative to the current folder when below it, as Ruff prints paths."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


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


def location_label(filename: str, line: int, column: int, cell: int | None = None) -> str:
    path = display_path(filename)
    if cell is not None:
        return f"{path}:cell {cell}:{line}:{column}"
    return f"{path}:{line}:{column}"


def absolute(filename: str) -> str:
    return str(Path(filename).absolute())
