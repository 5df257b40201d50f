"""Notebooks in ``mpfix repair``: a change made on the script verify runs for a notebook
(its code cells, one after the other) is applied to the cell holding its line.

A change is anchored on the text of its line (``changes.Change``), so it is applied to
each code cell's source in turn until one takes it; the notebook's JSON is written back
with its own indentation, key order and final newline. Validation compiles the changed
cells (IPython lines masked as ``mpfix check`` masks them) and runs ``apply``'s checks on
them. Static fixes are not offered for notebooks here (``mpfix apply`` fixes notebooks).
"""

from __future__ import annotations

import json
import re


def _read(text: str) -> dict | None:
    """The notebook, or None when ``mpfix check`` could not read it either (``notebooks.read_notebook``)."""
    from pathlib import Path

    from mpfix.notebooks import read_notebook

    raw = read_notebook(text, Path("notebook.ipynb"))
    return raw if isinstance(raw, dict) else None


def _indent(text: str) -> int:
    match = re.search(r"^\{\s*\n( +)\"", text)
    return len(match.group(1)) if match else 1


def apply(text: str, edit) -> str | None:
    """``text`` (a notebook's JSON) with ``edit(cell_source) -> new source or None`` applied
    to the first code cell that takes it; None when no cell does."""
    from mpfix.notebooks import cell_source as _source

    notebook = _read(text)
    if notebook is None:
        return None
    for cell in notebook["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = _source(cell)
        new = edit(source)
        if new is None or new == source:
            continue
        cell["source"] = new.splitlines(keepends=True) if isinstance(cell.get("source"), list) else new
        out = json.dumps(notebook, indent=_indent(text), ensure_ascii=False)
        return out + "\n" if text.endswith("\n") else out
    return None


def cells(text: str) -> list[str]:
    from mpfix.notebooks import cell_source

    notebook = _read(text)
    if notebook is None:
        return []
    return [cell_source(c) for c in notebook["cells"] if c.get("cell_type") == "code"]


def problem(path, original: str, new: str) -> str | None:
    """Why the notebook ``new`` must not replace ``original`` (None: it passes)."""
    from mpfix.notebooks import mask

    before, after = cells(original), cells(new)
    if not after or len(before) != len(after):
        return "the notebook's code cells changed in number (not valid JSON?)"
    from mpfix.verify.python_problem import python_problem

    for old, fixed in zip(before, after):
        if old == fixed:
            continue
        old_masked, new_masked = mask(old, [0]), mask(fixed, [0])
        if old_masked is None or new_masked is None:
            return "a changed cell is not Python"
        why = python_problem(path.with_suffix(".py"), old_masked[0], new_masked[0])
        if why is not None:
            return why
    return None
