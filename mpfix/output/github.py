"""GitHub Actions workflow commands: one ``::error`` annotation per finding."""

from __future__ import annotations

from mpfix.output import Report, display_path


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(report: Report) -> str:
    lines = []
    for e in report.errors:
        path = display_path(e.filename)
        lines.append(
            f"::error title={_escape_property(f'mpfix ({e.code})')},file={_escape_property(path)},"
            f"line={e.line},col={e.column}::{_escape_data(f'{path}:{e.line}:{e.column}: {e.code} {e.message}')}"
        )
    for f in report.findings:
        path = display_path(f.filename)
        lines.append(
            f"::error title={_escape_property(f'mpfix ({f.code})')},file={_escape_property(path)},"
            f"line={f.start.line},col={f.start.column},endLine={f.end.line},endColumn={f.end.column}"
            f"::{_escape_data(f'{path}:{f.start.line}:{f.start.column}: {f.code} {f.message}')}"
        )
    return "\n".join(lines)
