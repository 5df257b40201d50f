"""``mpfix verify``: run a training script briefly and prove its loss is healthy.

Importing this module imports click and nothing heavy: TensorFlow only ever runs in the
child processes, and the rest of mpfix.verify is imported when the command runs.
"""

from __future__ import annotations

import os
import signal
import sys

import click

EXIT_ERROR = 2


def _progress():
    if not sys.stderr.isatty():
        return None

    def show(line: str) -> None:
        sys.stderr.write("\r\x1b[2K" + line[:150])
        sys.stderr.flush()

    return show


def _unwritable(path) -> str | None:
    """Why a report cannot be written to ``path`` (None when it can)."""
    if not path:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"the folder {folder} is not writable"
    return None


@click.command(
    "verify",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=(
        "Exit status: 0 healthy, 10 non-finite, 11 stalled, 12 underflow, 13 diverged, "
        "14 crashed, 15 timeout, 16 no-steps, 17 at-risk, 18 unstable, 19 non-finite-metric, 2 usage error. "
        "With --before-after: the patched script's verdict. SCRIPT may be a notebook "
        "(.ipynb): its code cells run as one script."
    ),
)
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--steps", default=50, show_default=True, type=click.IntRange(min=1), help="Optimizer steps to measure.")
@click.option("--baseline/--no-baseline", default=True, show_default=True, help="Also run under float32 and compare.")
@click.option(
    "--policy",
    type=click.Choice(["script", "mixed_float16", "mixed_bfloat16"]),
    default="script",
    show_default=True,
    help="Policy of the mixed run: the script's own, or forced.",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed for random, NumPy, TensorFlow and Keras.")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(min=0.1), help="Seconds per run.")
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True)
@click.option("--python", "python", default=sys.executable, show_default="this interpreter", help="Interpreter for the script.")
@click.option("--locate", is_flag=True, help="After a non-finite verdict, find the first op producing NaN/Inf.")
@click.option(
    "--before-after",
    "patched",
    type=click.Path(exists=True, dir_okay=False),
    help="Verify SCRIPT and this patched copy side by side.",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True), help="Write every step as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True), help="Write a self-contained HTML report.")
@click.option("--sarif", "sarif_path", type=click.Path(dir_okay=False, writable=True),
              help="Write the runtime findings (per-op float16 evidence) as SARIF 2.1.0.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Run SCRIPT as N workers of a MultiWorkerMirroredStrategy cluster (TF_CONFIG on local ports).",
)
@click.option(
    "--hang-after",
    default=120.0,
    show_default=True,
    type=click.FloatRange(min=1.0),
    help="With --workers (or a launcher's workers): seconds without a new step on any worker that make a hang.",
)
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(1, 2), help="2: mixed and float32 runs at once.")
def verify(
    script, script_args, steps, baseline, policy, seed, timeout, device, python, locate, patched, json_path, html_path, workers, hang_after, jobs,
    sarif_path=None,
):
    """Run SCRIPT under mixed precision, judge it: healthy, non-finite-metric, non-finite, stalled, underflow, diverged, crashed, timeout, no-steps, at-risk or unstable.

    SCRIPT [-- SCRIPT_ARGS...] runs in a child process (with --workers N: N worker
    processes of a MultiWorkerMirroredStrategy cluster), beside a float32 baseline."""
    from mpfix.verify import report_text
    from mpfix.verify.run import Terminated, VerifyError, before_after
    from mpfix.verify.run import verify as run_verify

    options = dict(
        steps=steps,
        seed=seed,
        timeout=timeout,
        baseline=baseline,
        policy=policy,
        device=device,
        python=python,
        locate=locate,
        jobs=jobs,
        progress=_progress(),
        # Workers read no input (N processes cannot share one stdin).
        stdin="forward" if workers == 1 else "devnull",
        workers=workers,
        hang_after=hang_after,
    )
    for option, path in (("--json", json_path), ("--html", html_path), ("--sarif", sarif_path)):
        problem = _unwritable(path)
        if problem:
            # Said before the run, not after minutes of it.
            click.echo(f"mpfix verify: error: {option} {path}: {problem}", err=True)
            sys.exit(EXIT_ERROR)
    try:
        if patched:
            result = before_after(script, patched, list(script_args), **options)
            text = report_text.render_before_after(result)
        else:
            result = run_verify(script, list(script_args), **options)
            text = report_text.render(result)
    except VerifyError as exc:
        click.echo(f"mpfix verify: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    except Terminated as exc:
        if options["progress"] is not None:
            sys.stderr.write("\r\x1b[2K")
        name = signal.Signals(exc.signum).name
        click.echo(f"mpfix verify: {name}: the script's processes were stopped and the temporary folder removed", err=True)
        sys.exit(128 + exc.signum)
    if options["progress"] is not None:
        sys.stderr.write("\r\x1b[2K")
    click.echo(text)
    if json_path:
        from mpfix.verify import report_json

        report_json.write(result, json_path)
    if html_path:
        from mpfix.verify import report_html

        report_html.write(result, html_path)
    if sarif_path:
        from mpfix.verify import report_sarif
        from mpfix.verify.metric_judge import findings as metric_findings
        from mpfix.verify.report_text import runtime_findings

        final = getattr(result, "after", result)
        report_sarif.write(runtime_findings(final) + metric_findings(final), sarif_path)
    sys.exit(result.exit_code)


if __name__ == "__main__":
    verify()
