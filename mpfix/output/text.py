"""``path:line:col: CODE [*] message`` lines and a summary, as Ruff prints them."""

from __future__ import annotations

import difflib

import click

from mpfix.display import printable
from mpfix.findings import Edit, FixSafety
from mpfix.output.report import Report, location_label
from mpfix.source import lines as lines_of


def _apply_edits(lines: list[str], edits: list[Edit]) -> list[str]:
    text = "".join(lines)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    for edit in sorted(edits, key=lambda e: (e.start.line, e.start.column), reverse=True):
        begin = starts[edit.start.line - 1] + edit.start.column - 1
        end = starts[edit.end.line - 1] + edit.end.column - 1
        text = text[:begin] + edit.content + text[end:]
    return lines_of(text)


def _shown(line: str) -> str:
    """A source line as a terminal may show it: control characters escaped as ``printable`` does (an
    escape sequence in a string literal must not drive the terminal or a CI log), tabs kept."""
    return "\t".join(printable(part) for part in line.split("\t"))


def _excerpt(text: str, line: int, column: int, end_line: int, end_column: int) -> list[str]:
    lines = [line.rstrip("\r\n") for line in lines_of(text)]
    if not 0 < line <= len(lines):
        return []
    width = len(str(line))
    source = lines[line - 1]
    stop = end_column if end_line == line else len(source) + 1
    carets = " " * (column - 1) + "^" * max(1, stop - column)
    return [
        f"{' ' * width} |",
        f"{line} | {_shown(source)}",
        f"{' ' * width} | {click.style(carets, fg='red', bold=True)}",
    ]


def render(report: Report, *, full: bool) -> str:
    out: list[str] = []
    for error in report.errors:
        out.append(f"{location_label(error.filename, error.line, error.column, error.cell)}: "
                   f"{click.style(error.code, fg='red', bold=True)} {printable(error.message)}")
    for finding in report.findings:
        marker = " [*]" if finding.fixable(report.unsafe_fixes) else ""
        out.append(f"{location_label(finding.filename, finding.line, finding.column, finding.cell)}: "
                   f"{click.style(finding.code, fg='red', bold=True)}{marker} {printable(finding.message)}")
        if full:
            # A notebook's text is its JSON while cell findings count lines within the cell.
            text = report.texts.get(finding.filename) if finding.cell is None else None
            if text is not None:
                out.extend(_excerpt(text, finding.line, finding.column, finding.end.line, finding.end.column))
            if finding.fix is not None:
                out.append(f"  = fix ({finding.fix.safety}): {finding.fix.description}")
                if text is not None and finding.edits:
                    old = lines_of(text)
                    new = _apply_edits(old, finding.edits)
                    for diff_line in list(difflib.unified_diff(old, new, n=1))[2:]:
                        out.append("    " + _shown(diff_line.rstrip("\r\n")))
            out.append("")
    return "\n".join(out)


def summary(report: Report, *, applied: int = 0, verb_fixed: bool = False) -> str:
    """The closing lines: counts, fixable counts and the unsafe-fix hint."""
    total = len(report.findings)
    lines: list[str] = []
    if verb_fixed and applied:
        lines.append(f"Fixed {applied} finding{'s' if applied != 1 else ''}.")
    if total == 0 and not report.errors:
        if not (verb_fixed and applied):
            lines.append("All checks passed!")
        if report.unchecked is not None:
            lines.append(report.unchecked.hint())
        return "\n".join(lines)
    if total:
        fixable = sum(1 for f in report.findings if f.fixable(report.unsafe_fixes))
        line = f"Found {total} finding{'s' if total != 1 else ''}"
        if verb_fixed:
            line = f"{total} finding{'s' if total != 1 else ''} remaining"
        if fixable and not verb_fixed:
            line += f" ({fixable} fixable with `mpfix apply`{' --unsafe-fixes' if report.unsafe_fixes else ''})"
        lines.append(line + ".")
        hidden = sum(1 for f in report.findings
                     if f.fix is not None and f.fix.safety is FixSafety.UNSAFE and not report.unsafe_fixes)
        if hidden:
            lines.append(f"{hidden} more fix{'es are' if hidden != 1 else ' is'} available with `--unsafe-fixes`.")
    if report.errors:
        n = len(report.errors)
        lines.append(f"{n} file{'s' if n != 1 else ''} could not be checked (MP000).")
    if report.unchecked is not None:
        lines.append(report.unchecked.hint())
    return "\n".join(lines)
