"""How paths are shown to users (a leaf: policy, target and the output formats all print paths)."""

from __future__ import annotations

import os


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``), as git quotes such names: a file
    named ``a\\nfake.py:1:1: MP999 ...`` must not print a forged finding line of its own, nor an
    escape sequence drive the terminal or a CI log. Idempotent (a backslash is printable)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def relative_path(filename: str) -> str:
    """Relative to the current folder when below it, as Ruff prints paths; unescaped (for formats
    that escape on their own: GitHub annotation properties)."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def display_path(filename: str) -> str:
    """The path as every terminal line and CI log shows it: relative (``relative_path``), with
    control characters escaped (``printable``). The one function paths go through on their way to a
    person; JSON and SARIF carry the real name."""
    return printable(relative_path(filename))
