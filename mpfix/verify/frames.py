"""Parent side: pick the user's own frame out of a traceback recorded by the child."""

from __future__ import annotations

import os
from pathlib import Path

_LIBRARY_MARKERS = ("site-packages", "dist-packages", f"{os.sep}lib{os.sep}python")


def is_user_file(filename: str, script: Path) -> bool:
    """A file of the user's project: under the script's folder and not an installed
    library (a virtualenv inside the project still counts as a library)."""
    path = os.path.abspath(filename)
    if path in _NOTEBOOKS:
        return True
    root = str(script.resolve().parent)
    if any(marker in path for marker in _LIBRARY_MARKERS):
        return False
    return path == str(script.resolve()) or path.startswith(root + os.sep)


def last_user_frame(frames: list[dict], script: Path) -> dict | None:
    """The innermost frame in the user's code, else the innermost frame at all."""
    for frame in reversed(frames):
        if is_user_file(frame.get("file", ""), script):
            return frame
    return frames[-1] if frames else None


def describe(frame: dict | None, script: Path) -> str:
    if not frame:
        return "unknown location"
    filename = frame.get("file", "?")
    place = notebook_place(filename, frame.get("line"))
    if place is not None:
        notebook, cell, line = place
        code = (frame.get("code") or "").strip()
        where = f"{notebook.name} cell {cell}, line {line}" if cell else notebook.name
        if frame.get("function") and frame["function"] != "<module>":
            where += f" in {frame['function']}()"
        return f"{where}: {code}" if code else where
    try:
        filename = os.path.relpath(filename, script.resolve().parent)
    except ValueError:
        pass
    code = (frame.get("code") or "").strip()
    where = f"{filename}:{frame.get('line')}"
    if frame.get("function") and frame["function"] != "<module>":
        where += f" in {frame['function']}()"
    return f"{where}: {code}" if code else where


# Scripts made from notebooks (parent side): generated path -> (notebook, [(cell, line)
# or None per script line, the first line being line 1]).
_NOTEBOOKS: dict[str, tuple[Path, list]] = {}


def register_notebook(script: Path, notebook: Path, where: list) -> None:
    _NOTEBOOKS[os.path.abspath(script)] = (Path(notebook), where)


def notebook_place(filename: str, line: int | None):
    """(notebook, cell, line in cell) for a line of a script made from a notebook."""
    entry = _NOTEBOOKS.get(os.path.abspath(filename or ""))
    if entry is None or not line:
        return None
    notebook, where = entry
    place = where[line - 1] if 0 < line <= len(where) else None
    return (notebook, *place) if place else (notebook, None, None)
