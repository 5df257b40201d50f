"""A small Python API over the linting pipeline, for tools built on mpfix (``verify --locate``)."""

from __future__ import annotations

from pathlib import Path

from mpfix.findings import Finding


def check_paths(paths: list[Path | str], *, select: tuple[str, ...] = ("ALL",), keras: str = "auto",
                policy: str | None = None) -> list[Finding]:
    """Findings for ``paths`` with default settings (no config file is read)."""
    from mpfix import selection
    from mpfix.discovery import discover
    from mpfix.engine import Options
    from mpfix.runner import Job, Mode, process_all

    rules = selection.select(select, ())
    files = list(discover([Path(p) for p in paths]))
    job = Job(rule_codes=tuple(r.code for r in rules), options=Options(keras=keras, policy=policy), mode=Mode.CHECK)
    return [f for result in process_all(files, job) for f in result.findings]
