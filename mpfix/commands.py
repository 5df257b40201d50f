"""The linting subcommands: check, diff, apply, rules, explain."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import click

from mpfix import config as config_mod
from mpfix.cli import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, unified_diff
from mpfix.display import printable
from mpfix.output import FORMATS, Report, display_path, render
from mpfix.output.text import summary


def _split_codes(values: tuple[str, ...]) -> tuple[str, ...] | None:
    if not values:
        return None
    return tuple(c.strip().upper() for v in values for c in v.split(",") if c.strip())


def common_options(func):
    """Options shared by check, diff and apply."""

    @click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
    @click.option("--select", multiple=True, help="Rule codes or prefixes to enable (comma-separated; ALL).")
    @click.option("--extend-select", multiple=True, help="Codes to enable on top of the configured selection.")
    @click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable.")
    @click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also apply fixes that change behaviour.")
    @click.option("--keras", type=click.Choice(["auto", "2", "3"]), default=None,
                  help="Keras generation to write fixes for (auto: from the file's imports, the project's "
                       "declared dependencies, then the installed packages; see --verbose).")
    @click.option("--policy", type=click.Choice(["mixed_float16", "mixed_bfloat16", "float32"]), default=None,
                  help="Assume this dtype policy for the checked project.")
    @click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
    @click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
    @click.option("-q", "--quiet", is_flag=True, help="Print findings only, no summary.")
    @click.option("-v", "--verbose", is_flag=True, help="Also say which Keras generation each file was checked for, and why.")
    @click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
                  help="Worker processes (default: one per core).")
    @click.option("--no-cache", is_flag=True, help="Ignore and do not write the .mpfix_cache of clean results.")
    @click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                  help="pyproject.toml to read [tool.mpfix] from (default: the nearest one).")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def _settings(paths, config_path, select, extend_select, ignore, unsafe_fixes, keras, policy):
    start = paths[0] if paths else Path.cwd()
    pyproject = config_path or config_mod.find_pyproject(start if start.exists() else Path.cwd())
    settings = config_mod.load(pyproject)
    return settings.with_overrides(
        select=_split_codes(select), extend_select=_split_codes(extend_select), ignore=_split_codes(ignore),
        unsafe_fixes=unsafe_fixes, keras=keras, policy=policy,
    )


def run(mode_name: str, paths, *, fmt, quiet, config_path, select, extend_select, ignore,
        unsafe_fixes, keras, policy, jobs=None, no_cache=False, accept=None, loss_scale=None, verbose=False):
    """Shared body of check/diff/apply: settings → discovery → runner → (results, report)."""
    from mpfix.discovery import discover
    from mpfix.findings import FileError

    try:
        settings = _settings(paths, config_path, select, extend_select, ignore, unsafe_fixes, keras, policy)
    except config_mod.ConfigError as exc:
        click.echo(f"mpfix: error: {printable(str(exc))}", err=True)
        sys.exit(EXIT_ERROR)
    paths = list(paths) or [Path(".")]
    errors: list[FileError] = []
    for p in paths:
        if not p.exists() and not p.is_symlink():
            errors.append(FileError(str(p), "no such file or directory"))
    _bound_projects(p for p in paths if p.exists() or p.is_symlink())
    # A dangling or looping symlink named explicitly is read (and reported as such), not skipped.
    unlisted: list[tuple[Path, str]] = []
    files = list(discover([p for p in paths if p.exists() or p.is_symlink()], exclude=settings.exclude,
                          base=settings.config_file.parent if settings.config_file is not None else None,
                          unreadable=unlisted))
    errors += [FileError(str(folder), why) for folder, why in unlisted]
    try:  # each file gets the [tool.mpfix] closest to it (Ruff), unless --config names one for all
        groups = [(settings, files)] if config_path is not None else config_mod.by_closest_config(
            files, settings, dict(select=_split_codes(select), extend_select=_split_codes(extend_select),
                                  ignore=_split_codes(ignore), unsafe_fixes=unsafe_fixes, keras=keras, policy=policy))
    except config_mod.ConfigError as exc:
        click.echo(f"mpfix: error: {printable(str(exc))}", err=True)
        sys.exit(EXIT_ERROR)
    kept = {f for _, group in groups for f in group}  # a nearer [tool.mpfix]'s exclude may drop some
    files = [f for f in files if f in kept]
    if not files and not errors and not quiet:
        # Ruff's behaviour: a warning, exit 0 (a pre-commit run or a CI glob that matches nothing is not an error).
        click.echo("mpfix: warning: no Python files found (.py, .ipynb) under "
                   + ", ".join(display_path(str(p)) for p in paths), err=True)
    stale_table, cache_dir = False, None
    if len(groups) == 1:
        settings = groups[0][0]
    if accept is None and not verbose and len(groups) == 1 and fmt in ("text", "full", "json", "json-run", "github"):
        cache_dir = None if no_cache or not files else _cache_dir(files)
        untriggered, stale_table = _untriggered(files, settings, cache_dir)
        if untriggered:
            # No selected rule's trigger occurs in any file: nothing would be parsed, so the rules (and
            # LibCST, most of such a run's cost) are not even imported (mpfix.trigger_table).
            from mpfix.unchecked import from_triggers

            return [], Report(findings=[], errors=errors, unsafe_fixes=settings.unsafe_fixes, texts={},
                              files_checked=len(files),
                              unchecked=from_triggers(files, settings, cache_dir))
    from mpfix import selection
    from mpfix.engine import Options
    from mpfix.runner import Job, Mode, process_all

    if stale_table and cache_dir is not None:
        from mpfix import trigger_table

        trigger_table.store(cache_dir)  # the next untriggered run answers from it
    from mpfix.runner import is_terminal

    results = []
    for group_settings, group_files in groups:
        try:
            rules = selection.select_configured(group_settings, [
                code for codes in (select, extend_select, ignore) for code in _split_codes(codes) or ()])
        except config_mod.ConfigError as exc:
            click.echo(f"mpfix: error: {printable(str(exc))}", err=True)
            sys.exit(EXIT_ERROR)
        base = group_settings.config_file.parent if group_settings.config_file else Path.cwd()
        ignored_for = {f: selection.ignored_for_file(f, group_settings.per_file_ignores, base) for f in group_files}
        job = Job(
            rule_codes=tuple(r.code for r in rules),
            options=Options(keras=group_settings.keras, policy=group_settings.policy,
                            unsafe_fixes=group_settings.unsafe_fixes, loss_scale=loss_scale),
            mode=Mode(mode_name),
            want_edits=fmt in ("json", "json-run", "full"),
            max_file_bytes=group_settings.max_file_bytes,
        )
        try:
            results += process_all(group_files, job, ignored_for, jobs=jobs, cache=not no_cache and accept is None,
                                   progress=is_terminal() and not quiet, accept=accept)
        except KeyboardInterrupt:
            # Said here because only here is it true; the group then exits 130.
            click.echo("mpfix: files already fixed keep their fixes, the rest are untouched", err=True)
            raise
    for r in results:
        errors.extend(r.errors)
    findings = [f for r in results for f in r.findings]
    texts = {str(r.path): r.original for r in results if r.original is not None}
    from mpfix.unchecked import collect

    report = Report(findings=findings, errors=errors, unsafe_fixes=settings.unsafe_fixes,
                    texts=texts, files_checked=len(files), unchecked=collect(results, settings.policy))
    if verbose or fmt == "sarif":
        from mpfix.target import describe, targets_of

        report.targets = targets_of(files, settings.keras)
        if verbose:
            for line in describe(report.targets):
                click.echo(f"mpfix: {printable(line)}", err=True)
    if verbose or fmt in ("json-run", "sarif"):
        report.declared_unreadable = _declared_unreadable(files)
    if verbose:
        from mpfix.policy import describe as describe_policies

        for line in describe_policies(files, settings.policy):
            click.echo(f"mpfix: {printable(line)}", err=True)
    return results, report


def _bound_projects(paths) -> None:
    """Without a project marker, the project facts read what the run names, not the whole working
    directory (``mpfix.project``'s docstring); the configuration is still looked up from it."""
    from mpfix import project

    if project.set_scope(project.scope_of(paths)):
        from mpfix.policy import forget_projects

        forget_projects()  # facts computed for another scope (an earlier run in this process)


def _declared_unreadable(files) -> tuple:
    """Dependency declarations that could not be read, for the run metadata (one lookup per folder)."""
    from mpfix import declared
    from mpfix.output.run_notes import Declaration
    from mpfix.project import root_of_folder

    found = {}
    for path in {Path(f).parent: Path(f) for f in files}.values():
        folder = os.path.abspath(path.parent)
        for item in declared.unreadable(path):
            # ``where`` is relative to the folder declared's lookup stops at (configuration's root).
            file = os.path.join(root_of_folder(folder) or folder, item.where)
            found[(file, item.text)] = Declaration(file, item.where, item.text)
    return tuple(found.values())


def _cache_dir(files):
    from mpfix.cache import cache_dir_for

    return cache_dir_for(files)


def _untriggered(files, settings, cache_dir) -> tuple[bool, bool]:
    """(no selected rule can run on any of ``files``, the packaged trigger table is stale).

    The packaged table (``mpfix/_trigger_data.py``) answers first; the rules' source is hashed
    only when its answer would be used, so a triggered run pays nothing. When it is stale, a
    table the full path left in the project's cache folder answers instead.
    """
    from mpfix import trigger_table

    def untriggered(table) -> bool:
        codes = trigger_table.selected(table, settings.select, settings.ignore, settings.extend_select)
        return codes is not None and trigger_table.nothing_to_check(files, codes, table, settings.max_file_bytes,
                                                                    settings.policy)

    table = trigger_table.load(verify=False)
    answer = table is not None and untriggered(table)
    if table is not None and not answer:
        return False, False
    if answer and trigger_table.current():
        return True, False
    cached = trigger_table.from_cache(cache_dir) if cache_dir is not None else None
    return cached is not None and untriggered(cached), cached is None


def _emit(fmt: str, report: Report, quiet: bool, **summary_args) -> None:
    body = render(fmt, report)
    if body:
        click.echo(body)
    if fmt in ("text", "full") and not quiet:
        text = summary(report, **summary_args)
        if text:
            click.echo(text)


@click.command()
@common_options
@click.option("--add-noqa", is_flag=True,
              help="Append `# noqa: CODE` to each line with a finding, keeping existing noqa codes (adopting mpfix).")
@click.option("--statistics", is_flag=True, help="Show the number of findings per rule instead of the findings.")
def check(paths, fmt, quiet, exit_zero, add_noqa, statistics, **kwargs):
    """Report mixed-precision findings (exit 1 when there are any)."""
    if statistics and fmt not in ("text", "full", "json"):
        click.echo("mpfix: error: --statistics works with --format text or json", err=True)
        sys.exit(EXIT_ERROR)
    results, report = run("check", paths, fmt=fmt, quiet=quiet, **kwargs)
    if add_noqa:
        sys.exit(_add_noqa(results, report))
    if statistics:
        from mpfix.output.statistics import render as render_statistics

        _echo_errors(report)
        body = render_statistics(report, fmt)
        if body:
            click.echo(body)
    else:
        _emit(fmt, report, quiet)
    if report.errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if report.findings and not exit_zero else EXIT_CLEAN)


def _echo_errors(report: Report) -> None:
    for e in report.errors:
        click.echo(f"{display_path(e.filename)}:{e.line}:{e.column}: {e.code} {printable(e.message)}", err=True)


def _add_noqa(results, report: Report) -> int:
    """``check --add-noqa``: write the directives; exit 0, or 2 when a file could not be checked or written."""
    from mpfix.noqa import add_noqa

    outcome = add_noqa(results)
    _echo_errors(report)
    for message in outcome.messages:
        click.echo(f"mpfix: {printable(message)}", err=True)
    for e in outcome.errors:
        click.echo(f"{display_path(e.filename)}: {e.code} {printable(e.message)}", err=True)
    click.echo(f"Added {outcome.added} noqa directive{'s' if outcome.added != 1 else ''}.", err=True)
    return EXIT_ERROR if report.errors or outcome.errors else EXIT_CLEAN


@click.command()
@common_options
def diff(paths, fmt, quiet, exit_zero, **kwargs):
    """Show the fixes as a unified diff; nothing is written (exit 1 when there are changes)."""
    results, report = run("diff", paths, fmt="text", quiet=quiet, **kwargs)
    changed = [r for r in results if r.fixed is not None]
    for r in changed:
        click.echo(unified_diff(display_path(str(r.path)), r.original, r.fixed), nl=False)
    for e in report.errors:
        click.echo(f"{display_path(e.filename)}:{e.line}:{e.column}: {e.code} {printable(e.message)}", err=True)
    if not quiet:
        fixes = sum(r.applied for r in changed)
        click.echo(f"Would fix {fixes} finding{'s' if fixes != 1 else ''} in {len(changed)} "
                   f"file{'s' if len(changed) != 1 else ''}.", err=True)
    if report.errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if changed and not exit_zero else EXIT_CLEAN)


@click.command()
@common_options
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when files were changed.")
@click.option("--fix-only", is_flag=True,
              help="Write the fixes and say how many; do not report or exit 1 for findings left (the pre-commit hook).")
@click.option("-i", "--interactive", is_flag=True, help="Show each fix as a diff and ask y/n/q before applying it.")
@click.option("--loss-scale", type=click.FloatRange(min=1.0), default=None,
              help="Write a fixed loss scale N instead of dynamic loss scaling (a last resort; see `mpfix explain MP101`).")
@click.option("--verify", "verify_script", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="After fixing, run this training script before and after the fixes (`mpfix verify`) "
                   "and exit with the fixed script's verdict code.")
def apply(paths, fmt, quiet, exit_zero, exit_non_zero_on_fix, fix_only, interactive, loss_scale, verify_script,
          **kwargs):
    """Write the fixes in place (safe ones; unsafe ones too with --unsafe-fixes).

    Exits 1 when findings remain that could not be fixed (or with
    --exit-non-zero-on-fix when a file changed), 2 on errors. With --verify,
    exits with the verdict code of the fixed script (see `mpfix verify --help`).
    """
    accept = None
    if interactive:
        from mpfix.interactive import Reviewer

        accept = Reviewer()
        kwargs["jobs"] = 1
    original = verify_script.read_bytes() if verify_script is not None else None
    if verify_script is not None and not paths:
        paths = (verify_script,)
    results, report = run("apply", paths, fmt=fmt, quiet=quiet, accept=accept, loss_scale=loss_scale, **kwargs)
    applied = sum(r.applied for r in results if r.written)
    if fix_only:
        # Ruff's --fix-only: leftover findings are the check hook's to report, so pre-commit shows them once.
        _echo_errors(report)
        written = sum(1 for r in results if r.written)
        if written and not quiet:
            click.echo(f"mpfix: fixed {applied} finding{'s' if applied != 1 else ''} in {written} "
                       f"file{'s' if written != 1 else ''}", err=True)
        if report.errors:
            sys.exit(EXIT_ERROR)
        sys.exit(EXIT_FINDINGS if exit_non_zero_on_fix and written else EXIT_CLEAN)
    _emit(fmt, report, quiet, applied=applied, verb_fixed=True)
    if report.errors:
        sys.exit(EXIT_ERROR)
    if verify_script is not None:
        sys.exit(_verify_before_after(verify_script, original))
    if exit_zero:
        sys.exit(EXIT_CLEAN)
    if report.findings or (exit_non_zero_on_fix and any(r.written for r in results)):
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_CLEAN)


def _verify_before_after(script: Path, original: bytes) -> int:
    """Run ``script`` as it was (``original``) and as it is now; print both verdicts."""
    from mpfix.verify import report_text
    from mpfix.verify.run import VerifyError, before_after
    from mpfix.verify.run import verify as run_verify

    try:
        if script.read_bytes() == original:
            click.echo(f"\n{display_path(str(script))} was not changed; verifying it as it is.")
            result = run_verify(script, [])
            click.echo(report_text.render(result))
            return result.exit_code
        # The "before" copy sits beside the script so its relative imports and data paths still work.
        before = script.with_name(f".{script.stem}.mpfix-before{script.suffix}")
        before.write_bytes(original)
        try:
            result = before_after(before, script, [])
        finally:
            before.unlink(missing_ok=True)
        result.before.script = script  # report the user's file name, not the temporary copy's
    except VerifyError as exc:
        click.echo(f"mpfix apply --verify: error: {exc}", err=True)
        return EXIT_ERROR
    click.echo("")
    click.echo(report_text.render_before_after(result))
    return result.exit_code


@click.command()
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text", show_default=True)
def rules(fmt):
    """List every rule: code, name, fix safety."""
    import json

    from mpfix.codemods import all_rules
    from mpfix.rule_docs import rules_table_markdown

    found = all_rules()
    if fmt == "markdown":
        click.echo(rules_table_markdown(found))
    elif fmt == "json":
        click.echo(json.dumps([{"code": r.code, "name": r.name, "fix": str(r.fix_safety), "message": r.message,
                                "keras": list(r.keras_generations), "requires_float16": r.requires_float16}
                               for r in found], indent=2))
    else:
        width = max(len(r.name) for r in found)
        for r in found:
            click.echo(f"{r.code}  {r.name:<{width}}  {str(r.fix_safety):<6}  {r.message}")


@click.command()
@click.argument("code")
def explain(code):
    """Explain one rule: what it does, why it breaks, example, fix."""
    from mpfix.codemods import all_rules, rule_by_code
    from mpfix.rule_docs import FILE_ERROR_CODE, explain_file_error
    from mpfix.rule_docs import explain as explain_rule

    if code.upper() == FILE_ERROR_CODE:
        click.echo(explain_file_error())
        return
    rule = rule_by_code(code)
    if rule is None:
        valid = ", ".join(r.code for r in all_rules())
        click.echo(f"mpfix: error: unknown rule code {code!r}; valid codes: {valid}", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(explain_rule(rule))
