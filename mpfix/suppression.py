"""Inline suppression: ``# noqa``, ``# noqa: MP201`` and ``# mpfix: ignore[MP201]``.

A comment suppresses findings that start or end on its line. ``# mpfix: noqa``
on a line of its own suppresses the whole file (Ruff's ``# ruff: noqa``).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*mpfix:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
_FILE = re.compile(r"^#\s*mpfix:\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?\s*$", re.IGNORECASE)
_ALL = "*"
_MAYBE = re.compile(r"noqa|mpfix", re.IGNORECASE)


@dataclass
class Suppressions:
    lines: dict[int, set[str]] = field(default_factory=dict)
    file_codes: set[str] = field(default_factory=set)

    def suppresses(self, code: str, start_line: int, end_line: int) -> bool:
        if _ALL in self.file_codes or code in self.file_codes:
            return True
        for line in {start_line, end_line}:
            codes = self.lines.get(line)
            if codes is not None and (_ALL in codes or code in codes):
                return True
        return False


def _codes(raw: str | None) -> set[str]:
    if raw is None or not raw.strip():
        return {_ALL}
    return {c.upper() for c in re.split(r"[\s,]+", raw.strip()) if c}


def _comments(text: str):
    try:
        # newline=None: "\r\n" and a lone "\r" end a line as for Python (tokenize splits only at
        # "\n"; a "\r"-ended line used to run on into the next, so a `# noqa` in a file with CR or
        # mixed line ends was counted on the wrong line and suppressed nothing, or another finding).
        for tok in tokenize.generate_tokens(io.StringIO(text, newline=None).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # Fall back to a line scan; a stray '#' in a string can only over-suppress.
        from mpfix.source import lines

        for number, line in enumerate(lines(text), 1):
            index = line.find("#")
            if index >= 0:
                yield number, line[index:]


def parse(text: str) -> Suppressions:
    """Collect the suppressions of one file (only called when it has findings)."""
    result = Suppressions()
    if not _MAYBE.search(text):
        return result  # no suppression comment can be there: skip tokenizing the file
    for line, comment in _comments(text):
        whole = _FILE.match(comment.strip())
        if whole is not None:
            result.file_codes |= _codes(whole.group("codes"))
            continue
        for pattern in (_NOQA, _IGNORE):
            match = pattern.search(comment)
            if match is not None:
                result.lines.setdefault(line, set()).update(_codes(match.group("codes")))
    return result
