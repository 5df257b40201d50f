"""The data that flows from rules to output: findings, fixes and their safety."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import libcst as cst


class FixSafety(str, enum.Enum):
    """How much a fix may change behaviour (Ruff's applicability)."""

    SAFE = "safe"  # keeps behaviour; applied by default
    UNSAFE = "unsafe"  # changes behaviour on purpose; needs --unsafe-fixes
    # Right or wrong depending on what the code does at run time (Ruff's display-only): shown,
    # never applied by `apply`; `mpfix repair` tries it and keeps it only when the run proves it.
    DISPLAY_ONLY = "display-only"
    NONE = "none"  # report only

    def __str__(self) -> str:
        return self.value


@dataclass
class Fix:
    """Node replacements in one module, applied together or not at all.

    ``changes`` maps an original node (by identity) to its replacement, which
    may be a node, ``cst.RemoveFromParent()`` or a ``cst.FlattenSentinel``.
    ``imports`` are whole import statements (``"import tensorflow as tf"``) the
    fixed code needs; they are added at the top when missing.
    """

    changes: dict["cst.CSTNode", Any]
    safety: FixSafety
    description: str
    imports: tuple[str, ...] = ()


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based, like Ruff's output


@dataclass
class Edit:
    """One textual change: replace ``start``..``end`` with ``content``."""

    start: Position
    end: Position
    content: str


@dataclass(frozen=True)
class MessageRef:
    """Which of its rule's message templates rendered a finding's text (SARIF's ``message.id``)."""

    name: str | None = None  # a key of the rule's ``messages``; None: its main ``message``
    notes: tuple[str, ...] = ()  # the notes the report appended, in order
    keras_unknown: bool = False  # the engine appended the unknown-Keras-target hint (fix withheld)


@dataclass
class Finding:
    """One problem found in one file."""

    code: str
    message: str
    filename: str
    start: Position
    end: Position
    fix: Fix | None = None
    # Textual form of the fix, filled in by the engine for output that needs it.
    edits: list[Edit] = field(default_factory=list)
    cell: int | None = None  # notebook cell (1-based), when the file is a notebook
    node: Any = field(default=None, repr=False, compare=False)
    # The fields of the rule's message template, as its report gave them (``message`` is the
    # template rendered with them): what a tool reads instead of parsing the text.
    fields: dict[str, str] = field(default_factory=dict)
    # The template ``message`` was rendered from (None: not from a rule's report, e.g. a runtime finding).
    template: MessageRef | None = None

    @property
    def line(self) -> int:
        return self.start.line

    @property
    def column(self) -> int:
        return self.start.column

    @property
    def fix_safety(self) -> FixSafety:
        return self.fix.safety if self.fix is not None else FixSafety.NONE

    def fixable(self, unsafe_fixes: bool, display_only: bool = False) -> bool:
        """Whether ``apply`` may write this fix (``display_only``: `repair`, which proves it by running)."""
        if self.fix is None or self.fix.safety is FixSafety.NONE:
            return False
        if self.fix.safety is FixSafety.DISPLAY_ONLY:
            return display_only
        return self.fix.safety is FixSafety.SAFE or unsafe_fixes


@dataclass
class FileError:
    """A file mpfix could not read, parse or fix (reported as MP000 / exit 2)."""

    filename: str
    message: str
    line: int = 1
    column: int = 1
    code: str = "MP000"
    cell: int | None = None  # notebook cell (1-based) when ``line``/``column`` count within it
