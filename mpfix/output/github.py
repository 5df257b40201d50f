"""GitHub Actions workflow commands: one ``::error`` annotation per finding."""

from __future__ import annotations

from mpfix.display import printable, relative_path
from mpfix.output.report import Report, location_label
from mpfix.findings import Position
from mpfix.output.notebook_lines import Placer


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _file_property(filename: str) -> str:
    """The path as GitHub's runner reads it back: CR/LF and the separators in its own escapes (which it
    decodes), any other control character (ESC) escaped as the text formats show it: the runner has
    no escape for those, and a raw one would reach the log."""
    path = relative_path(filename)
    if not path.isprintable():
        path = "".join(ch if ch.isprintable() or ch in "\r\n" else printable(ch) for ch in path)
    return _escape_property(path)


def render(report: Report) -> str:
    lines = []
    placer = Placer()
    for e in report.errors:
        start, _ = placer.span(e.filename, e.cell, Position(e.line, e.column), Position(e.line, e.column))
        label = location_label(e.filename, e.line, e.column, e.cell)
        lines.append(
            f"::error title={_escape_property(f'mpfix ({e.code})')},file={_file_property(e.filename)},"
            f"line={start.line},col={start.column}::{_escape_data(f'{label}: {e.code} {printable(e.message)}')}"
        )
    for f in report.findings:
        # A notebook's annotation goes on the line of the .ipynb file; its text names the cell's line.
        start, end = placer.span(f.filename, f.cell, f.start, f.end)
        label = location_label(f.filename, f.start.line, f.start.column, f.cell)
        lines.append(
            f"::error title={_escape_property(f'mpfix ({f.code})')},file={_file_property(f.filename)},"
            f"line={start.line},col={start.column},endLine={end.line},endColumn={end.column}"
            f"::{_escape_data(f'{label}: {f.code} {printable(f.message)}')}"
        )
    if report.unchecked is not None:
        # A notice, not an error: the run's outcome and exit code do not change.
        lines.append(f"::notice title={_escape_property('mpfix (float16 not checked)')}::"
                     f"{_escape_data(report.unchecked.hint())}")
    return "\n".join(lines)
