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
    from mpfix.parsing import TooComplex, parse_module

    try:
        compile(new, str(path), "exec")
        fixed = parse_module(new)
        before = parse_module(original)
    except TooComplex as exc:  # LibCST's native parser could crash on it (mpfix.parsing)
        return f"it cannot be checked safely (line {exc.line}: {exc.message})"
    except (SyntaxError, ValueError, cst.ParserSyntaxError) as exc:
        return f"it does not compile ({exc})"
    except (RecursionError, MemoryError):  # CPython's compiler on a deeply nested expression
        return "it cannot be checked safely (an expression is nested too deeply to compile)"
    try:
        return Validator(original, str(path), before).problem(new, fixed)
    except (RecursionError, MemoryError):
        return "it cannot be checked safely (an expression is nested too deeply to validate)"
