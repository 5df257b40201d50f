"""Files the float16 rules skipped because no mixed policy reaches them, counted for the summary.

The float16 rules (``requires_float16``: MP101, MP112, MP2xx) run only where a mixed_float16
policy reaches a file (``mpfix.policy``). A file whose text triggers one of them but that no
policy reaches is dropped before parsing, so a clean run may not have looked at it for float16
at all: the summary says how many such files there were. Counting them is free (the triggers
and the project scan are computed anyway); counting the findings they would have had is not
(it needs the float16 analysis the run skipped), so the summary says they were not counted.
"""

from __future__ import annotations

from pathlib import Path

from mpfix.output.run_notes import Unchecked
from mpfix.policy import Policy


def skipped(engine, text: str, path: Path, ignored: tuple[str, ...] = ()) -> bool:
    """Whether a float16 rule's trigger occurs in ``text`` but no mixed policy reaches ``path``.

    The engine's own test (``Engine._candidates``): triggered, not ignored, and the file's reach.
    A configured policy decides for every file, so nothing is skipped unseen.
    """
    if engine.options.policy is not None:
        return False
    if path.suffix == ".ipynb":  # the code cells, as the triggers see them (mpfix.trigger_table)
        from mpfix.trigger_table import notebook_code

        cells = notebook_code(text.encode("utf-8", "surrogatepass"))
        text = "" if cells is None else cells.decode("utf-8", "replace")
    if not any(rule.requires_float16 and not rule.code.startswith(ignored)
               and rule.may_match(text) for rule in engine.rules):
        return False
    return engine.reach(text, path).policy is Policy.NONE


def reach_is_none(path: Path) -> bool:
    """Whether no mixed policy reaches ``path`` (for a cached result stored under its project's policy)."""
    from mpfix import policy as policies

    return policies.reach_for(Path(path)).policy is Policy.NONE


def collect(results, configured: str | None = None) -> Unchecked | None:
    """The files of ``results`` (``runner.FileResult``) the float16 rules skipped; None when there are none.

    ``configured``: the ``policy`` setting, which decides for every file (a cached result cannot tell).
    """
    if configured is not None:
        return None
    files = tuple(str(r.path) for r in results if r.float16_unchecked)
    if not files:
        return None
    return Unchecked(files, None, _library(files))


def from_triggers(files, settings, cache_dir: Path | None) -> Unchecked | None:
    """The same for a run that the trigger table answered without parsing (``mpfix.trigger_table``).

    That answer means no file or project that a float16-only rule triggers in mentions float16
    at all, so none of them is reached: every file such a rule triggers in was skipped.
    """
    from mpfix import trigger_table

    if settings.policy is not None:
        return None
    table = trigger_table.load(verify=True)
    if table is None and cache_dir is not None:
        table = trigger_table.from_cache(cache_dir)
    if table is None:
        return None
    codes = trigger_table.selected(table, settings.select, settings.ignore, settings.extend_select)
    float16 = [code for code in codes or () if code in table.float16_only]
    found: list[tuple[Path, bytes]] = []
    for path in files:
        data = trigger_table._read_regular(path, settings.max_file_bytes)
        if data is not None and str(path).endswith(".ipynb"):
            data = trigger_table.notebook_code(data)
        if data is not None and any(table.matches(code, data) for code in float16):
            found.append((Path(path), data))
    if found and settings.per_file_ignores:
        # Rare enough to pay for the rules' import (mpfix.selection) rather than match the globs twice.
        from mpfix import selection

        base = settings.config_file.parent if settings.config_file else Path.cwd()

        def kept(path: Path, data: bytes) -> bool:
            ignored = selection.ignored_for_file(path, settings.per_file_ignores, base)
            return any(table.matches(code, data) for code in float16 if not code.startswith(ignored))

        found = [(path, data) for path, data in found if kept(path, data)]
    # No project here mentions float16 (the table's answer): each is a library in the hint's sense.
    return Unchecked(tuple(str(path) for path, _ in found), None, True) if found else None


def _library(files) -> bool:
    """Whether no file of these files' projects runs under mixed_float16 (no float16 entry point)."""
    from mpfix import policy as policies

    roots = {policies.project_root(Path(f)) for f in files}
    return all(policies.project_reach(root).policy is not Policy.FLOAT16 for root in roots)
