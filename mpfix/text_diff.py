"""Text edits between two versions of a source (Ruff's JSON ``fix.edits``, the server's quick fixes)."""

from __future__ import annotations

import difflib

from mpfix.findings import Edit, Position
from mpfix.source import lines


def _offset_to_position(line_starts: list[int], offset: int) -> Position:
    import bisect

    line = bisect.bisect_right(line_starts, offset) - 1
    return Position(line + 1, offset - line_starts[line] + 1)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for line in lines(text):
        starts.append(starts[-1] + len(line))
    return starts


def _line_opcodes(old_lines: list[str], new_lines: list[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib opcodes, without its quadratic cost on repetitive files (168 fixes: 4 of 7 s).

    Common head and tail lines are matched first; with as many lines on both sides (most fixes
    keep the line count) the differing lines are paired in place; else difflib diffs the rest.
    """
    head = 0
    limit = min(len(old_lines), len(new_lines))
    while head < limit and old_lines[head] == new_lines[head]:
        head += 1
    tail = 0
    while tail < limit - head and old_lines[-1 - tail] == new_lines[-1 - tail]:
        tail += 1
    a, b = old_lines[head:len(old_lines) - tail], new_lines[head:len(new_lines) - tail]
    if len(a) == len(b):
        opcodes, start = [], None
        for k in range(len(a) + 1):
            same = k == len(a) or a[k] == b[k]
            if not same and start is None:
                start = k
            elif same and start is not None:
                opcodes.append(("replace", head + start, head + k, head + start, head + k))
                start = None
        return opcodes
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=len(a) > 2000)
    return [(tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in matcher.get_opcodes()]


def text_edits(old: str, new: str, by_line: bool = False) -> list[Edit]:
    """Minimal edits turning ``old`` into ``new``, one per changed region.

    ``by_line``: a region of changed lines that keeps its line count is one edit per line (fixes
    on neighbouring lines then get one edit each, ``fix_edits``).
    """
    starts = _line_starts(old)
    old_lines = lines(old)  # as Python, editors and the findings count them, not str.splitlines()
    new_lines = lines(new)
    edits: list[Edit] = []
    opcodes = _line_opcodes(old_lines, new_lines)
    if by_line:
        opcodes = [(tag, i1 + k, i1 + k + 1, j1 + k, j1 + k + 1) if tag == "replace" and i2 - i1 == j2 - j1
                   else (tag, i1, i2, j1, j2)
                   for tag, i1, i2, j1, j2 in opcodes for k in (range(i2 - i1) if tag == "replace"
                                                                 and i2 - i1 == j2 - j1 else (0,))]
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        a = "".join(old_lines[i1:i2])
        b = "".join(new_lines[j1:j2])
        prefix = 0
        while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
            prefix += 1
        suffix = 0
        while suffix < min(len(a), len(b)) - prefix and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]:
            suffix += 1
        begin = starts[i1] + prefix
        end = starts[i1] + len(a) - suffix
        edits.append(Edit(_offset_to_position(starts, begin), _offset_to_position(starts, end),
                          b[prefix: len(b) - suffix]))
    return edits
