"""Bytes ↔ text for Python sources, keeping what users care about byte for byte.

The encoding (PEP 263 cookie), a UTF-8 BOM and the newline style all survive
a round trip: LibCST keeps each line's own ending, and we re-encode with the
encoding we decoded with and put the BOM back.
"""

from __future__ import annotations

import codecs
import io
import re
import tokenize
from dataclasses import dataclass


_HEAD = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)?[^\r\n]*(?:\r\n|\r|\n)?")


def lines(text: str) -> list[str]:
    """``text``'s lines with their ends, split where Python (and LSP, and patch) end a line: ``\\n``,
    ``\\r\\n``, ``\\r``. Not ``str.splitlines()``, which also splits at a form feed, ``\\x0b``,
    ``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028`` and ``\\u2029``: inside a line for Python, so a row
    counted that way is not the row a finding, an editor or a diff means."""
    return io.StringIO(text, newline="").readlines()


def _line_and_column(body: bytes, index: int) -> tuple[int, int]:
    """1-based (line, column in bytes) of byte ``index``, lines ended as Python ends them."""
    parts = lines(body[:index].decode("latin-1"))
    if not parts or parts[-1].endswith(("\n", "\r")):
        return len(parts) + 1, 1
    return len(parts), len(parts[-1]) + 1


def _two_lines(data: bytes):
    """A ``readline`` over the first two lines of ``data`` as Python ends lines: ``detect_encoding`` reads
    ``\\n``-ended lines, so a ``\\r``-only file was one line to it (a byte that is not UTF-8 anywhere in
    it: "invalid or missing encoding declaration" at 1:1; a ``coding:`` comment anywhere: the cookie)."""
    head = _HEAD.match(data).group(0)
    return iter([line.encode("latin-1") for line in lines(head.decode("latin-1"))] + [b""]).__next__


class SourceError(Exception):
    """A file that is not Python source we can read."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass(frozen=True)
class Source:
    text: str
    encoding: str  # codec name used to decode, without "-sig"
    bom: bool

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def decode_notebook(data: bytes) -> Source:
    """A notebook's bytes as text: nbformat is UTF-8 JSON, whatever a cell's first line says."""
    bom = data.startswith(codecs.BOM_UTF8)
    body = data[len(codecs.BOM_UTF8):] if bom else data
    try:
        return Source(text=body.decode("utf-8"), encoding="utf-8", bom=bom)
    except UnicodeDecodeError as exc:
        line, column = _line_and_column(body, exc.start)
        raise SourceError(f"not a notebook mpfix can read: byte 0x{body[exc.start]:02x} is not valid UTF-8 "
                          "(notebooks are UTF-8 JSON)", line, column) from exc


def decode(data: bytes) -> Source:
    """Decode Python source bytes; raise SourceError with a clear message otherwise."""
    if b"\x00" in data:
        raise SourceError("not a Python source file: it contains NUL bytes (binary?)")
    bom = data.startswith(codecs.BOM_UTF8)
    try:
        encoding, _ = tokenize.detect_encoding(_two_lines(data))
    except SyntaxError as exc:
        raise SourceError(f"cannot read encoding declaration: {exc.msg if hasattr(exc, 'msg') else exc}") from exc
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    body = data[len(codecs.BOM_UTF8):] if bom else data
    try:
        text = body.decode(encoding)
    except LookupError as exc:  # a codec, but not bytes to text (rot13, hex, zlib_codec): CPython refuses it too
        raise SourceError(f"cannot read encoding declaration: {encoding!r} is not a text encoding") from exc
    except UnicodeDecodeError as exc:
        line, column = _line_and_column(body, exc.start)
        raise SourceError(
            f"cannot decode as {encoding}: byte 0x{body[exc.start]:02x} is invalid "
            "(declare the file's encoding with a `# -*- coding: ... -*-` line)",
            line,
            column,
        ) from exc
    except UnicodeError as exc:  # punycode, undefined: their decoders raise a bare UnicodeError (CPython refuses too)
        raise SourceError(f"cannot decode as {encoding}: {exc}") from exc
    return Source(text=text, encoding=encoding, bom=bom)
