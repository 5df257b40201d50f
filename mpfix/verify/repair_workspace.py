"""``mpfix repair``'s working copy of the script's folder, and the texts its changes compose to.

``Workspace`` mirrors the folder in a temporary one (Python files and notebooks copied, so a change never touches
the user's files before ``repair.write``; everything else linked); ``compose`` applies changes in order to the
originals; ``problem`` is the validation ``mpfix apply`` runs on every fix.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mpfix.verify.changes import Change

# Folders linked whole into the working copy, never walked.
_LINKED = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".pytest_cache"}


class Workspace:
    """A working copy of the script's folder: Python files copied, the rest linked."""

    def __init__(self, folder: Path, tmp: Path) -> None:
        self.folder = folder.resolve()
        self.root = tmp / "work"
        self.root.mkdir()
        self.originals: dict[Path, str] = {}
        for current, dirs, files in os.walk(self.folder):
            here = Path(current)
            target = self.root / here.relative_to(self.folder)
            keep = []
            for name in dirs:
                if name in _LINKED or (here / name).is_symlink():
                    os.symlink(here / name, target / name)
                else:
                    (target / name).mkdir()
                    keep.append(name)
            dirs[:] = keep
            for name in files:
                source = here / name
                # Only regular files are copied: a FIFO or a device named x.py is linked like data
                # (copying would fail, or block on the FIFO), so it cannot stop the repair.
                if name.endswith((".py", ".ipynb")) and not source.is_symlink() and source.is_file():
                    shutil.copy2(source, target / name)
                else:
                    os.symlink(source, target / name)
        self.current: dict[Path, str] = {}

    def mirror(self, path: Path) -> Path:
        return self.root / Path(path).resolve().relative_to(self.folder)

    def original(self, path: Path) -> Path:
        path = Path(os.path.abspath(path))
        try:
            return self.folder / path.relative_to(self.root)
        except ValueError:
            return path

    def text(self, path: Path) -> str | None:
        """The original text of a user file (None: not a readable Python file of the folder)."""
        path = Path(path).resolve()
        if path not in self.originals:
            from mpfix.source import SourceError

            try:
                self.originals[path] = _read(path).text
            except (OSError, ValueError, SourceError):
                return None
        return self.originals[path]

    def set(self, texts: dict[Path, str]) -> None:
        """Make the working copy hold ``texts`` (user path -> text) and the originals elsewhere."""
        for path in list(self.current):
            if path not in texts:
                shutil.copy2(path, self.mirror(path))
                del self.current[path]
        for path, text in texts.items():
            if self.current.get(path) != text:
                # The file's own encoding and BOM: a coding cookie must stay true.
                self.mirror(path).write_bytes(_read(path).encode(text))
                self.current[path] = text


def _read(path: Path):
    """The decoded source of a file the run used; OSError for a FIFO, a device or a file over
    10 MB (``safe_read``: reading a FIFO would block the repair forever)."""
    from mpfix import safe_read
    from mpfix.source import decode

    return decode(safe_read.read_bytes(path, follow_outside=True))


def compose(workspace: Workspace, changes: list[Change]) -> dict[Path, str] | None:
    """The texts of the files ``changes`` touch, each applied in order to the originals;
    None when one no longer applies."""
    texts: dict[Path, str] = {}
    for change in changes:
        path = Path(change.path).resolve()
        current = texts.get(path, workspace.text(path))
        if current is None:
            return None
        new = change.apply(current)
        if new is None:
            return None
        texts[path] = new
    return texts


def problem(path: Path, original: str, new: str) -> str | None:
    """Why ``new`` must not replace ``original`` (None: it passes the validation
    ``mpfix apply`` runs on every fix: it parses and compiles, uses no name the file does not
    bind, creates no float16/float32 mix)."""
    if Path(path).suffix == ".ipynb":
        from mpfix.verify import repair_notebooks

        return repair_notebooks.problem(Path(path), original, new)
    from mpfix.verify.python_problem import python_problem

    return python_problem(Path(path), original, new)
