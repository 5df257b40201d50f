"""How paths are shown to users (a leaf: policy, target and the output formats all print paths)."""

from __future__ import annotations

import os


def display_path(filename: str) -> str:
    """Relative to the current folder when below it, as Ruff prints paths."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel
