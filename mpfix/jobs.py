"""What a run asks of each file (``Job``, ``Mode``) and what comes back (``FileResult``): picklable
records shared by the runner and the notebook runner.

Below both: ``runner`` imports ``notebooks``, so ``notebooks`` cannot import the runner for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from mpfix.engine import Options
from mpfix.findings import FileError, Finding
from mpfix.safe_read import DEFAULT_LIMIT


class Mode(str, Enum):
    CHECK = "check"
    DIFF = "diff"
    APPLY = "apply"


@dataclass
class FileResult:
    path: Path
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    original: str | None = None  # text, when a fix changed it or findings need excerpts
    fixed: str | None = None
    applied: int = 0
    written: bool = False
    cached: bool = False  # known clean from the cache: not parsed this run
    clean_keys: tuple[bytes, ...] = ()  # cache keys this run proved clean (old and written content)
    findings_key: bytes | None = None  # check mode: cache key under which these findings may be stored
    float16_unchecked: bool = False  # a float16 rule triggers but was skipped: no mixed policy reaches the file

    @property
    def clean(self) -> bool:
        return not self.findings and not self.errors


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to process files (picklable)."""

    rule_codes: tuple[str, ...]
    options: Options
    mode: Mode
    want_edits: bool = False
    max_file_bytes: int = DEFAULT_LIMIT
