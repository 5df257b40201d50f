"""``--select``/``--ignore``: codes and prefixes (``MP2``, ``MP201``, ``ALL``) → the rules to run."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from pathlib import Path

from mpfix.codemods import Rule, all_rules
from mpfix.config import ConfigError


def validate(codes: Iterable[str], rules: tuple[type[Rule], ...] | None = None) -> None:
    """Raise ConfigError naming the valid codes when a code or prefix matches no rule."""
    rules = rules if rules is not None else all_rules()
    known = [r.code for r in rules]
    bad = [c for c in codes if c != "ALL" and not any(k.startswith(c) for k in known)]
    if bad:
        raise ConfigError(f"unknown rule code(s): {', '.join(bad)}; valid codes: ALL, {', '.join(known)}")


def select_configured(settings, command_line: Iterable[str] = ()) -> tuple[type[Rule], ...]:
    """``select`` over ``settings`` (a ``[tool.mpfix]`` table with the ``command_line`` codes on top): a bad
    code the command line did not give came from the table, and the error names its file."""
    validate(tuple(command_line))
    try:
        validate(tuple(code for codes in settings.per_file_ignores.values() for code in codes))
        return select(settings.select, settings.ignore, settings.extend_select)
    except ConfigError as exc:
        if settings.config_file is None:
            raise
        raise ConfigError(f"{settings.config_file}: [tool.mpfix] {exc}") from None


def _matches(code: str, selectors: Iterable[str]) -> int:
    """Length of the longest selector matching ``code`` (0 = none); ALL counts as 1."""
    best = 0
    for sel in selectors:
        if sel == "ALL":
            best = max(best, 1)
        elif code.startswith(sel):
            best = max(best, len(sel) + 1)
    return best


def select(select: Iterable[str], ignore: Iterable[str], extend_select: Iterable[str] = ()) -> tuple[type[Rule], ...]:
    """Rules enabled by the selectors; the more specific selector wins, as in Ruff."""
    chosen = tuple(select) + tuple(extend_select)
    ignored = tuple(ignore)
    validate(chosen + ignored)
    return tuple(r for r in all_rules() if _matches(r.code, chosen) > _matches(r.code, ignored))


def ignored_for_file(path: Path, per_file_ignores: dict[str, tuple[str, ...]], base: Path | None) -> tuple[str, ...]:
    """Codes that ``per-file-ignores`` switches off for ``path`` (globs relative to the config's folder)."""
    if not per_file_ignores:
        return ()
    try:
        rel = path.resolve().relative_to(base.resolve()).as_posix() if base else path.as_posix()
    except (ValueError, OSError, RuntimeError):  # outside the config's folder, or a symlink loop
        rel = path.as_posix()
    codes: list[str] = []
    for glob, ignored in per_file_ignores.items():
        if fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(path.name, glob):
            codes.extend(ignored)
    return tuple(codes)
