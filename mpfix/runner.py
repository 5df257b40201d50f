"""One file from disk to result: read → decode → lint/fix → (apply) write.

``process_file`` is a plain top-level function of picklable arguments so a
process pool can run it; the results it returns hold no CST nodes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from mpfix.engine import Engine, Options
from mpfix.findings import FileError, Finding
from mpfix.source import SourceError, decode
from mpfix.writer import write_atomic


class Mode(str, Enum):
    CHECK = "check"
    DIFF = "diff"
    APPLY = "apply"


@dataclass
class FileResult:
    path: Path
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    original: str | None = None  # text, when a fix changed it (for diffs)
    fixed: str | None = None
    applied: int = 0
    written: bool = False


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to process files (picklable)."""

    rule_codes: tuple[str, ...]
    options: Options
    mode: Mode
    want_edits: bool = False
    max_file_bytes: int = 10 * 1024 * 1024
    ignored_by_path: tuple[tuple[str, tuple[str, ...]], ...] = ()


_ENGINES: dict[tuple, Engine] = {}


def engine_for(job: Job) -> Engine:
    key = (job.rule_codes, job.options)
    engine = _ENGINES.get(key)
    if engine is None:
        from codemods import all_rules

        rules = tuple(r for r in all_rules() if r.code in job.rule_codes)
        engine = _ENGINES[key] = Engine(rules, job.options)
    return engine


def _read(path: Path, limit: int) -> bytes:
    size = path.stat().st_size
    if size > limit:
        raise SourceError(f"file is too large ({size / 1e6:.1f} MB > {limit / 1e6:.1f} MB); "
                          "raise [tool.mpfix] max-file-size to check it")
    with open(path, "rb") as handle:
        return handle.read(limit + 1)


def _os_error(path: Path, exc: OSError) -> FileError:
    reason = exc.strerror or str(exc)
    return FileError(str(path), f"cannot read file: {reason}")


def process_file(path: Path, job: Job, ignored: tuple[str, ...] = (), accept=None) -> FileResult:
    """Lint (and for diff/apply, fix) one file; never raises for bad input."""
    result = FileResult(path=path)
    try:
        data = _read(path, job.max_file_bytes)
        source = decode(data)
    except SourceError as exc:
        result.errors.append(FileError(str(path), exc.message, exc.line, exc.column))
        return result
    except OSError as exc:
        result.errors.append(_os_error(path, exc))
        return result
    if path.suffix == ".ipynb":
        from mpfix import notebooks

        return notebooks.process_notebook(path, source, job, ignored)
    engine = engine_for(job)
    fixing = job.mode is not Mode.CHECK
    try:
        lint = engine.lint(source.text, path, fix=fixing, edits=job.want_edits, ignored=ignored, accept=accept)
    except Exception as exc:  # a bug in a rule must not stop the run or touch the file
        result.errors.append(FileError(str(path), f"internal error in mpfix ({type(exc).__name__}: {exc}); "
                                                  "nothing was written; please report it"))
        return result
    result.findings = lint.findings
    result.errors = lint.errors
    result.applied = lint.applied
    if job.want_edits:
        result.original = source.text
    if lint.fixed_text is not None and not lint.errors:
        result.original = source.text
        result.fixed = lint.fixed_text
        if job.mode is Mode.APPLY:
            try:
                new_bytes = source.encode(lint.fixed_text)
                write_atomic(path, new_bytes)
                result.written = True
            except UnicodeEncodeError as exc:
                result.errors.append(FileError(str(path), f"fixed text cannot be encoded as {source.encoding}: {exc.reason}; nothing was written"))
            except OSError as exc:
                result.errors.append(FileError(str(path), f"cannot write file: {exc.strerror or exc}; nothing was written"))
    return result


def process_all(paths: list[Path], job: Job, ignored_for: dict[Path, tuple[str, ...]] | None = None, *,
                jobs: int | None = None, cache: bool = True, progress: bool = False,
                accept=None) -> list[FileResult]:
    """Process every file; results come back in the order of ``paths``.

    ``jobs``: worker processes (None: one per core; one file or ``accept``
    given: in-process). ``cache``: reuse results of unchanged files.
    ``progress``: show a progress bar on stderr.
    """
    ignored_for = ignored_for or {}
    return [process_file(p, job, ignored_for.get(p, ()), accept) for p in paths]


def is_terminal() -> bool:
    return os.isatty(2)
