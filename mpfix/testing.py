"""Helpers for testing rules on snippets (used by mpfix's own tests and by rule authors)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mpfix.engine import Engine, LintResult, Options


def lint_snippet(code: str, select: tuple[str, ...] | str = ("ALL",), *, keras: int | str = 3,
                 policy: str | None = None, fix: bool = False, unsafe_fixes: bool = True,
                 loss_scale: float | None = None, filename: str = "snippet.py") -> LintResult:
    """Lint ``code`` (dedented) as if it were a file; the project around it is not consulted."""
    from mpfix import selection

    if isinstance(select, str):
        select = (select,)
    rules = selection.select(select, ())
    engine = Engine(rules, Options(keras=str(keras), policy=policy, unsafe_fixes=unsafe_fixes,
                                    project_policy=False, loss_scale=loss_scale))
    return engine.lint(textwrap.dedent(code).lstrip("\n"), Path(filename), fix=fix, edits=True)


def fixed(code: str, select: tuple[str, ...] | str = ("ALL",), **kwargs) -> str:
    """The code after every applicable fix (the input itself when nothing changes)."""
    result = lint_snippet(code, select, fix=True, **kwargs)
    if result.errors:
        raise AssertionError(f"fixing failed: {result.errors}")
    return result.fixed_text if result.fixed_text is not None else textwrap.dedent(code).lstrip("\n")
