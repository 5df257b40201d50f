"""Where a line of a notebook cell sits in the ``.ipynb`` file itself.

Findings in a notebook count lines within their cell (``cell 3, line 2``): right for people,
wrong for SARIF and GitHub annotations, which mark lines of the file they name, the JSON. A
cell's ``source`` is a list of strings, one per line (nbformat writes each on its own line of
the file), or one string holding every line: this module finds, for a (cell, line, column), the
line and column of the file where that character of that string is written.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
from dataclasses import dataclass

from mpfix.findings import Position
from mpfix.source import lines as source_lines


class _Array(list):
    starts: list[int]


class _Object(dict):
    starts: dict[str, int]


def _decoder() -> json.JSONDecoder:
    """A pure-Python decoder that keeps where each array element and object value starts."""
    decoder = json.JSONDecoder()

    def parse_array(s_and_end, scan_once):
        starts: list[int] = []

        def recording(string, index):
            starts.append(index)
            return scan_once(string, index)

        values, end = json.decoder.JSONArray(s_and_end, recording)
        found = _Array(values)
        found.starts = starts
        return found, end

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        starts: list[int] = []

        def recording(string, index):
            starts.append(index)
            return scan_once(string, index)

        pairs, end = json.decoder.JSONObject(s_and_end, strict, recording, None, lambda p: p, memo)
        found = _Object(pairs)
        found.starts = {key: start for (key, _), start in zip(pairs, starts)}
        return found, end

    decoder.parse_array = parse_array
    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    return decoder


@dataclass(frozen=True)
class _Piece:
    offset: int  # where the string literal's opening quote is in the file
    text: str  # the decoded string


class NotebookLines:
    """Maps (cell, line, column) of a notebook to (line, column) of its ``.ipynb`` text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.cells: list[list[_Piece]] | None = None
        try:
            raw, _ = _decoder().raw_decode(text, len(text) - len(text.lstrip()))
            cells = raw["cells"]
            self.cells = [self._pieces(cell) for cell in cells]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            self.cells = None

    @staticmethod
    def _pieces(cell) -> list[_Piece]:
        if not isinstance(cell, _Object) or "source" not in cell:
            return []
        source, start = cell["source"], cell.starts["source"]
        if isinstance(source, str):
            return [_Piece(start, source)]
        if isinstance(source, _Array):
            return [_Piece(offset, item) for offset, item in zip(source.starts, source) if isinstance(item, str)]
        return []

    def physical(self, cell: int, position: Position) -> Position | None:
        """The file's (line, column) of ``position`` in ``cell`` (1-based), or None if it is not there."""
        if self.cells is None or not 0 < cell <= len(self.cells):
            return None
        pieces = self.cells[cell - 1]
        source = "".join(p.text for p in pieces)
        lines = source_lines(source)
        if not 0 < position.line <= max(len(lines), 1):
            return None
        wanted = sum(len(line) for line in lines[: position.line - 1]) + position.column - 1
        for piece in pieces:
            if wanted < len(piece.text) or piece is pieces[-1]:
                return self._in_literal(piece.offset, min(wanted, len(piece.text)))
            wanted -= len(piece.text)
        return None

    def _in_literal(self, quote: int, chars: int) -> Position:
        """The position of decoded character ``chars`` of the string literal opening at ``quote``."""
        text, i = self.text, quote + 1
        for _ in range(chars):
            if text[i] != "\\":
                i += 1
            elif text[i + 1] != "u":
                i += 2
            else:
                i += 6
                if 0xD800 <= int(text[i - 4:i], 16) < 0xDC00 and text[i:i + 2] == "\\u":
                    i += 6  # a surrogate pair is one decoded character
        line = text.count("\n", 0, i) + 1
        return Position(line, i - (text.rfind("\n", 0, i) + 1) + 1)


def read(filename: str, limit: int = 64 * 1024 * 1024) -> NotebookLines | None:
    """The notebook at ``filename`` as written now (after any fixes), or None if it cannot be read."""
    try:
        with open(filename, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return None
    if len(data) > limit:
        return None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    return NotebookLines(text.replace("\r\n", "\n"))


class Placer:
    """Where findings go in the files they name: a notebook's cell positions become the file's."""

    def __init__(self) -> None:
        self._notebooks: dict[str, NotebookLines | None] = {}

    def span(self, filename: str, cell: int | None, start: Position, end: Position) -> tuple[Position, Position]:
        """(start, end) in the file; positions in a cell that cannot be found stay as they are."""
        if cell is None:
            return start, end
        if filename not in self._notebooks:
            self._notebooks[filename] = read(filename)
        lines = self._notebooks[filename]
        first = lines.physical(cell, start) if lines is not None else None
        if first is None:
            return start, end
        last = lines.physical(cell, end)
        if last is None or (last.line, last.column) < (first.line, first.column):
            last = first
        return first, last
