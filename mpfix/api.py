"""A small Python API over the linting pipeline, for tools built on mpfix (``verify --locate``, ``mpfix server``)."""

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

    from mpfix import policy, project

    rules = selection.select(select, ())
    if project.set_scope(project.scope_of(paths)):  # no marker: the project facts read what is named
        policy.forget_projects()
    files = list(discover([Path(p) for p in paths]))
    job = Job(rule_codes=tuple(r.code for r in rules), options=Options(keras=keras, policy=policy), mode=Mode.CHECK)
    return [f for result in process_all(files, job) for f in result.findings]


def settings_for(path: Path):
    """The ``[tool.mpfix]`` settings of the project holding ``path`` (defaults when it has none).

    Raises ``mpfix.config.ConfigError`` when the table cannot be used.
    """
    from mpfix import config

    return config.load(config.find_pyproject(Path(path)))


def lint_text(text: str, path: Path | str, settings=None, *, fix: bool = False, unsafe_fixes: bool | None = None):
    """Lint ``text`` as ``mpfix check`` would lint the file ``path`` holding it (an editor's unsaved buffer).

    ``settings`` (default: :func:`settings_for` ``path``) choose the rules, per-file-ignores and
    Keras target. Each finding's fix comes with its exact text edits (``Finding.edits``, as in JSON
    output). With ``fix``, the result's ``fixed_text`` is the text with every fix applied that
    ``unsafe_fixes`` allows (default: the settings' choice), and its findings are what remains.
    Returns the engine's ``LintResult``; an excluded file gets an empty one. Python text only.
    """
    from mpfix import selection
    from mpfix.discovery import discover
    from mpfix.engine import LintResult, Options
    from mpfix.runner import Job, Mode, engine_for

    path = Path(path)
    lone = _lone_surrogate(text, str(path))
    if lone is not None:
        return LintResult(errors=[lone])
    if settings is None:
        settings = settings_for(path)
    # The globs match the path below their configuration's folder (Ruff; the CLI does the same).
    folder = settings.config_file.parent if settings.config_file is not None else None
    if settings.exclude and not list(discover([path], exclude=settings.exclude, base=folder)):
        return LintResult()
    rules = selection.select_configured(settings)
    base = settings.config_file.parent if settings.config_file else Path.cwd()
    ignored = selection.ignored_for_file(path, settings.per_file_ignores, base)
    unsafe = settings.unsafe_fixes if unsafe_fixes is None else unsafe_fixes
    job = Job(rule_codes=tuple(r.code for r in rules), mode=Mode.APPLY if fix else Mode.CHECK, want_edits=True,
              options=Options(keras=settings.keras, policy=settings.policy, unsafe_fixes=unsafe))
    return engine_for(job).lint(text, path, fix=fix, edits=not fix, ignored=ignored)



def _lone_surrogate(text: str, filename: str):
    """The error for a text holding half of a UTF-16 pair (an editor's JSON may escape one, "\\ud800"), else None.

    No file holds one (mpfix decodes strict UTF-8; a notebook cell is refused in ``mpfix.notebooks``),
    CPython cannot compile it, and encoding the text for the scans raised (an "internal error")."""
    import re

    from mpfix.findings import FileError
    from mpfix.source import lines

    found = re.search("[\ud800-\udfff]", text)
    if found is None:
        return None
    line, start = 1, 0
    for text_line in lines(text):
        if start + len(text_line) > found.start():
            break
        line, start = line + 1, start + len(text_line)
    return FileError(filename, f"this text holds a lone surrogate ({ascii(found.group())[1:-1]}), half of a UTF-16 "
                               "pair, which is not text; nothing was checked", line, found.start() - start + 1)
