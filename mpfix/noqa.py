"""``mpfix check --add-noqa``: suppress every current finding with a ``# noqa: CODE`` comment.

Ruff's behaviour, for adopting mpfix on an existing codebase: each finding's line gets
``  # noqa: CODE`` appended, or its codes merged into the line's ``# noqa: X`` (sorted, each
once). A line that ends inside a string or with a backslash continuation cannot hold a
comment; the finding's last line is used instead (a comment there suppresses it too), and
when neither can hold one the finding is skipped with a message. Every edited file must
tokenize and, if it parsed before, parse to the same syntax tree, so a comment can never
land inside a string; it is written atomically with its encoding, BOM and newlines kept.
Notebooks get the comments in their code cells.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from mpfix.findings import FileError, Finding
from mpfix.suppression import _NOQA

_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass
class Outcome:
    added: int = 0  # lines that gained or extended a noqa directive
    files: int = 0  # files written
    messages: list[str] = field(default_factory=list)  # findings that could not be suppressed
    errors: list[FileError] = field(default_factory=list)


def _lines(text: str) -> list[str]:
    """Lines with their endings, split where LibCST and tokenize split them (not at form feeds)."""
    from mpfix.source import lines

    return lines(text)


def _tokens(text: str):
    normalized = _NEWLINE.sub("\n", text)  # same lines and columns; tokenize splits only at "\n"
    return list(tokenize.generate_tokens(io.StringIO(normalized).readline))


@functools.lru_cache(maxsize=4)
def _layout(text: str):
    """(lines that end where a comment may follow, {line: (column, comment)}), or None if it does not tokenize.

    Kept for the last few texts: the editor server asks for one finding's directive at a time, each
    a tokenize and a parse of the whole buffer (8 findings of a 47 KB file: ~5 s before)."""
    try:
        tokens = _tokens(text)
    except (tokenize.TokenError, SyntaxError):
        return None
    open_lines: set[int] = set()
    comments: dict[int, tuple[int, str]] = {}
    for tok in tokens:
        if tok.type in (tokenize.NEWLINE, tokenize.NL):
            open_lines.add(tok.start[0])
        elif tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = (tok.start[1], tok.string)
    return open_lines, comments


def _codes_in(raw: str) -> list[str]:
    return [c.upper() for c in re.split(r"[\s,]+", raw.strip()) if c]


@functools.lru_cache(maxsize=4)
def _tree(text: str) -> str | None:
    try:
        return ast.dump(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _same_tree(old: str, new: str) -> bool:
    before = _tree(old)
    try:
        after = ast.dump(ast.parse(new))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return before is None
    return before is None or before == after


def add_noqa_to_text(text: str, findings: list[Finding], label: str = "") -> tuple[str, int, list[str]]:
    """(new text, lines changed, messages about findings that got no directive) for one Python text.

    ``findings`` are positioned in ``text`` (1-based lines). The new text is ``text`` when
    nothing was added or when the result would not parse to the same tree as ``text``.
    """
    layout = _layout(text)
    where = f"{label}:" if label else ""
    name = label or "<text>"
    if layout is None:
        return text, 0, [f"{name}: the text does not tokenize; no noqa directives added"] if findings else []
    open_lines, comments = layout
    wanted: dict[int, set[str]] = {}
    messages = []
    for finding in findings:
        target = next((line for line in (finding.start.line, finding.end.line) if line in open_lines), None)
        if target is None:
            messages.append(f"{where}{finding.start.line}:{finding.start.column}: {finding.code}: no noqa directive "
                            "added (its lines end inside a string or a line continuation)")
            continue
        wanted.setdefault(target, set()).add(finding.code)
    lines = _lines(text)
    changed = 0
    for number, codes in sorted(wanted.items()):
        if number > len(lines):
            continue
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        comment = comments.get(number)
        match = _NOQA.search(comment[1]) if comment is not None else None
        if match is not None:
            if match.group("codes") is None:
                continue  # a bare `# noqa` suppresses everything already
            existing = _codes_in(match.group("codes"))
            merged = sorted(set(existing) | codes)
            if set(merged) == set(existing):
                continue
            column = comment[0]
            directive = f"# noqa: {', '.join(merged)}"
            new_comment = comment[1][: match.start()] + directive + comment[1][match.end():]
            body = body[:column] + new_comment + body[column + len(comment[1]):]
        else:
            body = body.rstrip(" \t") + f"  # noqa: {', '.join(sorted(codes))}"
        lines[number - 1] = body + ending
        changed += 1
    if not changed:
        return text, 0, messages
    new_text = "".join(lines)
    if _layout(new_text) is None or not _same_tree(text, new_text):
        return text, 0, messages + [f"{name}: adding noqa directives would change the code; file left as it was"]
    return new_text, changed, messages


def _notebook(path: Path, source, findings: list[Finding], label: str) -> tuple[str | None, int, list[str]]:
    """The notebook's new text with directives in its code cells (None: unchanged or not rewritable)."""
    from mpfix import notebooks

    raw = notebooks._read(source.text, path)
    if isinstance(raw, FileError):
        return None, 0, [f"{label}: {raw.message}; no noqa directives added"]
    by_cell: dict[int, list[Finding]] = {}
    for finding in findings:
        by_cell.setdefault(finding.cell, []).append(finding)
    sources: dict[int, str] = {}
    added = 0
    messages: list[str] = []
    for number, cell_findings in sorted(by_cell.items(), key=lambda item: item[0] or 0):
        index = (number or 0) - 1
        if not 0 <= index < len(raw["cells"]):
            messages.append(f"{label}: cell {number} not found; no noqa directives added there")
            continue
        text = notebooks._source(raw["cells"][index])
        masked = notebooks.mask(text, [0])
        if masked is None:
            continue
        # Lines are found in the masked cell (IPython lines are `pass` there), then edited in the cell itself.
        new_masked, count, cell_messages = add_noqa_to_text(masked[0], cell_findings, f"{label}:cell {number}")
        messages += cell_messages
        if not count:
            continue
        new_text, count, cell_messages = _edit_like(text, masked[0], new_masked)
        messages += [f"{label}:cell {number}: {m}" for m in cell_messages]
        if count:
            sources[index] = new_text
            added += count
    if not sources:
        return None, 0, messages
    writer = notebooks._writer(source.text, raw)  # the notebook's own JSON layout, or None
    if writer is None:
        return None, 0, messages + [f"{label}: the notebook's JSON layout cannot be reproduced exactly, so it was "
                                    "not rewritten; no noqa directives added"]
    return writer(sources), added, messages


def _edit_like(text: str, masked: str, new_masked: str) -> tuple[str, int, list[str]]:
    """Carry the lines ``add_noqa_to_text`` changed in the masked cell over to the cell's own text."""
    old_lines, masked_lines, new_lines = _lines(text), _lines(masked), _lines(new_masked)
    if len(masked_lines) != len(new_lines) or len(old_lines) != len(masked_lines):
        return text, 0, ["cell lines could not be matched; no noqa directives added"]
    out, count = [], 0
    for original, before, after in zip(old_lines, masked_lines, new_lines):
        if before == after:
            out.append(original)
            continue
        # Only code lines change, and those are the same in the cell and the masked text, but for
        # the leading indent IPython removes from an indented cell (notebooks.mask does too).
        indent = original.rstrip("\r\n")[: len(original.rstrip("\r\n")) - len(before.rstrip("\r\n"))]
        if indent + before.rstrip("\r\n") != original.rstrip("\r\n") or indent.strip(" \t"):
            return text, 0, ["cell lines could not be matched; no noqa directives added"]
        out.append(indent + after.rstrip("\r\n") + original[len(original.rstrip("\r\n")):])
        count += 1
    return "".join(out), count, []


def add_noqa(results) -> Outcome:
    """Add directives for the findings of ``check`` results (``runner.FileResult``s); write the files."""
    from mpfix.output import display_path
    from mpfix.source import SourceError, decode
    from mpfix import safe_read
    from mpfix.writer import ReadOnlyError, write_atomic

    outcome = Outcome()
    for result in results:
        if not result.findings:
            continue
        path = Path(result.path)
        label = display_path(str(path))
        try:
            data = safe_read.read_bytes(path)
            source = decode(data)
        except (OSError, SourceError) as exc:
            outcome.errors.append(FileError(str(path), f"cannot read file: {exc}; no noqa directives added"))
            continue
        if path.suffix == ".ipynb":
            new_text, added, messages = _notebook(path, source, result.findings, label)
        else:
            new_text, added, messages = add_noqa_to_text(source.text, result.findings, label)
        outcome.messages += messages
        if not added or new_text is None or new_text == source.text:
            continue
        try:
            write_atomic(path, source.encode(new_text), expected=data)
        except UnicodeEncodeError as exc:
            outcome.errors.append(FileError(str(path), f"cannot encode as {source.encoding}: {exc.reason}; "
                                                       "nothing was written"))
            continue
        except ReadOnlyError:
            outcome.errors.append(FileError(str(path), "file is read-only; nothing was written"))
            continue
        except OSError as exc:
            outcome.errors.append(FileError(str(path), f"cannot write file: {exc.strerror or exc}; "
                                                       "nothing was written"))
            continue
        outcome.added += added
        outcome.files += 1
    return outcome
