"""``mpfix repair SCRIPT [-- ARGS]``: let TensorFlow find, fix and prove what the static rules miss.

Importing this module imports click only; the loop lives in ``mpfix.verify.repair``.
"""

from __future__ import annotations

import signal
import sys

import click

EXIT_ERROR = 2


@click.command(
    "repair",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=(
        "Exit status: 0 when the final verdict is healthy, else that verdict's code (see "
        "`mpfix verify --help`); 2 on usage errors. A script that verifies healthy is never changed."
    ),
)
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--diff", "diff_only", is_flag=True, help="Print the diff; write nothing.")
@click.option("--max-rounds", default=4, show_default=True, type=click.IntRange(min=0),
              help="Rounds of runtime candidates after the static fixes.")
@click.option("--timeout", default=1800.0, show_default=True, type=click.FloatRange(min=1.0),
              help="Seconds for the whole repair (every child run included).")
@click.option("--run-timeout", default=600.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds per child run.")
@click.option("--steps", default=50, show_default=True, type=click.IntRange(min=1), help="Optimizer steps per run.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True)
@click.option("--python", "python", default=sys.executable, show_default="this interpreter",
              help="Interpreter for the script.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1),
              help="Run SCRIPT as N workers of a MultiWorkerMirroredStrategy cluster (as `mpfix verify --workers`).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the repair as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write a self-contained HTML report.")
@click.option("--sarif", "sarif_path", type=click.Path(dir_okay=False),
              help="Write the runtime findings of the script as it was as SARIF 2.1.0.")
def repair(script, script_args, diff_only, max_rounds, timeout, run_timeout, steps, seed, device, python, workers,
           json_path, html_path, sarif_path):
    """Verify SCRIPT, apply the static fixes, then fix what the runtime evidence shows
    (float32 islands, float32 layers, loss scaling), keeping only changes that make the
    verdict better while the loss still agrees with float32; write them as `apply` does."""
    from mpfix.verify import report_repair
    from mpfix.verify.cli import _unwritable
    from mpfix.verify.repair import RepairError, write
    from mpfix.verify.repair import repair as run_repair
    from mpfix.verify.run import Terminated, VerifyError

    for option, path in (("--json", json_path), ("--html", html_path), ("--sarif", sarif_path)):
        problem = _unwritable(path)
        if problem:
            click.echo(f"mpfix repair: error: {option} {path}: {problem}", err=True)
            sys.exit(EXIT_ERROR)
    progress = None
    if sys.stderr.isatty():
        def progress(line: str) -> None:
            sys.stderr.write("\r\x1b[2K" + line[:150])
            sys.stderr.flush()
    try:
        result = run_repair(script, list(script_args), max_rounds=max_rounds, timeout=timeout, progress=progress,
                            steps=steps, seed=seed, device=device, python=python, run_timeout=run_timeout,
                            workers=workers)
    except (RepairError, VerifyError) as exc:
        click.echo(f"mpfix repair: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    except Terminated as exc:
        name = signal.Signals(exc.signum).name
        click.echo(f"mpfix repair: {name}: the script's processes were stopped, nothing was written", err=True)
        sys.exit(128 + exc.signum)
    if progress is not None:
        sys.stderr.write("\r\x1b[2K")
    if result.texts and not diff_only:
        write(result)
    click.echo(report_repair.render(result))
    if result.texts and not diff_only and result.written:
        click.echo(f"  wrote {len(result.written)} file{'s' if len(result.written) != 1 else ''}")
    elif result.texts and diff_only:
        click.echo("  --diff: nothing written")
    if json_path:
        report_repair.write_json(result, json_path)
    if html_path:
        report_repair.write_html(result, html_path)
    if sarif_path:
        from mpfix.verify import report_sarif

        report_sarif.write(result.findings, sarif_path)
    if result.errors:
        sys.exit(EXIT_ERROR)
    sys.exit(result.exit_code)
