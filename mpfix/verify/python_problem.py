"""Why a new text of a Python file must not be written: the validation ``mpfix apply`` runs on every fix.

A leaf of ``repair`` and ``repair_notebooks``: ``repair.problem`` dispatches notebooks to
``repair_notebooks``, which checks each changed cell with this, so neither imports the other back.
"""

from __future__ import annotations

from pathlib import Path


def python_problem(path: Path, original: str, new: str) -> str | None:
    """None when ``new`` parses and compiles, uses no name the file does not bind and creates no
    float16/float32 mix; else why not."""
    import libcst as cst

    from mpfix.fix_validation import Validator

    try:
        compile(new, str(path), "exec")
        fixed = cst.parse_module(new)
        before = cst.parse_module(original)
    except (SyntaxError, ValueError, cst.ParserSyntaxError) as exc:
        return f"it does not compile ({exc})"
    return Validator(original, str(path), before).problem(new, fixed)
