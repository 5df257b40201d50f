"""What an output format is given (``Report``) and the path/location helpers they share.

Apart from the package's ``__init__``, which dispatches to the formats: each format imports this
module, so no format imports the dispatcher that imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mpfix.display import display_path
from mpfix.findings import FileError, Finding
from mpfix.output.run_notes import Declaration, Unchecked


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


def location_label(filename: str, line: int, column: int, cell: int | None = None) -> str:
    path = display_path(filename)
    if cell is not None:
        return f"{path}:cell {cell}:{line}:{column}"
    return f"{path}:{line}:{column}"


def absolute(filename: str) -> str:
    return str(Path(filename).absolute())
