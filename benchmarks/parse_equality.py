"""mpfix's parse (``mpfix.parsing.parse_module``: no re-validation of parser-built nodes, MRO checks for
LibCST's ABCs) gives LibCST's own tree on every file of a corpus: ``module.code == text`` and a structural
``deep_equals`` with ``libcst.parse_module`` (validation on), and the same syntax errors.

usage: python benchmarks/parse_equality.py FOLDER [FOLDER ...]   (exit 1 on any difference)
``tests/test_parsing.py`` runs the same comparison on a sample.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import libcst as cst

from mpfix.parsing import TooComplex, parse_module, validation_active


def compare(text: str) -> str | None:
    """Why mpfix's parse of ``text`` differs from LibCST's (None: it does not)."""
    try:
        ours = parse_module(text)
    except TooComplex:
        return None  # refused before LibCST sees it: no tree to compare
    except cst.ParserSyntaxError as exc:
        try:
            cst.parse_module(text)
        except cst.ParserSyntaxError as theirs:
            same = (exc.message, exc.raw_line, exc.raw_column) == (theirs.message, theirs.raw_line, theirs.raw_column)
            return None if same else "different syntax errors"
        return "only mpfix's parse failed"
    if not validation_active():
        return "validation left off after the parse"
    if ours.code != text:
        return "code != text"
    if not ours.deep_equals(cst.parse_module(text)):
        return "trees differ"
    return None


def main(folders: list[str]) -> int:
    bad = 0
    for folder in folders:
        started, count = time.perf_counter(), 0
        for path in sorted(Path(folder).rglob("*.py")):
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            count += 1
            why = compare(text)
            if why is not None:
                bad += 1
                print(f"{path}: {why}")
        print(f"{folder}: {count} files compared, {time.perf_counter() - started:.1f} s")
    print("differences:", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    sys.exit(main(sys.argv[1:]))
