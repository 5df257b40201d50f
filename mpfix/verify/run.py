"""Parent side: run the user's script in child processes and judge it.

Public entry points (no TensorFlow is imported here):

* ``verify(script, args=(), **options) -> Report``: the mixed run, the float32 baseline
  and, under ``locate=True``, the check_numerics re-run after a non-finite verdict.
* ``before_after(original, patched, args=(), **options) -> BeforeAfter``: both scripts
  verified with the same options; one float32 baseline (of the patched script) is shared,
  since a fix is not meant to change what float32 does. ``BeforeAfter.exit_code`` is the
  patched script's.

Options (all keyword, defaults in ``Options``): steps, seed, timeout (seconds per child),
baseline, policy ("script", "mixed_float16", "mixed_bfloat16"), device ("auto", "cpu",
"gpu"), python (interpreter for the child), locate, jobs (1: children one after the other;
2: mixed and baseline at once), env (extra environment for the child), progress (a
callable taking one line of text, or None), stdin ("devnull", or "forward": this
process's stdin, given to every run, see ``mpfix.verify.stdin``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from mpfix.verify.kinds import Location, VerifyError  # re-exported: callers import them from here
from mpfix.verify.child import Child, raise_if_no_gpu
from mpfix.verify.outputs import Outputs
from mpfix.verify.records import RunResult
from mpfix.verify.stdin import Stdin
from mpfix.verify.verdict import Verdict, judge

POLICIES = ("script", "mixed_float16", "mixed_bfloat16")
DEVICES = ("auto", "cpu", "gpu")
STDIN_MODES = ("devnull", "forward")
# Signals that end mpfix but let it clean up: the children are killed and the temporary
# folder removed first.
CLEANUP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Terminated(BaseException):
    """mpfix received SIGTERM/SIGHUP during a run: children killed, temporary folder
    removed; the CLI exits 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _cleanup_on_signals():
    """Turn SIGTERM/SIGHUP into ``Terminated`` (main thread only: elsewhere Python cannot
    install handlers), so the ``finally`` blocks that kill the children and the temporary
    folder's context manager run before mpfix ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum, frame):
        if fired:  # already cleaning up
            return
        fired.append(signum)
        raise Terminated(signum)

    previous = {}
    for sig in CLEANUP_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@dataclass
class Options:
    steps: int = 50
    seed: int = 0
    timeout: float = 600.0
    baseline: bool = True
    policy: str = "script"
    device: str = "auto"
    python: str = sys.executable
    locate: bool = False
    jobs: int = 1
    env: dict = field(default_factory=dict)
    progress: Callable[[str], None] | None = None
    stdin: str = "devnull"
    # --workers N (N >= 2): N worker processes of a MultiWorkerMirroredStrategy cluster.
    workers: int = 1
    # --workers: no new step on any worker for this long (seconds) is a hang.
    hang_after: float = 120.0

    @classmethod
    def from_kwargs(cls, **kwargs) -> "Options":
        known = {f.name for f in fields(cls)}
        unknown = set(kwargs) - known
        if unknown:
            raise TypeError(f"unknown verify option(s): {', '.join(sorted(unknown))}")
        options = cls(**kwargs)
        if options.policy not in POLICIES:
            raise VerifyError(f"--policy must be one of {', '.join(POLICIES)}")
        if options.device not in DEVICES:
            raise VerifyError(f"--device must be one of {', '.join(DEVICES)}")
        if options.stdin not in STDIN_MODES:
            raise VerifyError(f"stdin must be one of {', '.join(STDIN_MODES)}")
        if options.workers < 1:
            raise VerifyError("--workers must be at least 1")
        if options.workers > 1 and options.locate:
            raise VerifyError("--locate does not work with --workers (it re-runs one process eagerly)")
        if options.steps < 1:
            raise VerifyError("--steps must be at least 1")
        if options.workers == 1:
            _refuse_one_worker_of_a_cluster(options)
        return options


def _refuse_one_worker_of_a_cluster(options: Options) -> None:
    """A TF_CONFIG naming several tasks: verify would run and stop one worker while its
    peers (started by hand) crash or wait, and judge a run that is not the cluster's."""
    text = options.env.get("TF_CONFIG", os.environ.get("TF_CONFIG"))
    if not text:
        return
    try:
        cluster = json.loads(text).get("cluster") or {}
        tasks = sum(len(v) for v in cluster.values() if isinstance(v, list))
    except (ValueError, AttributeError, TypeError):
        return
    if tasks > 1:
        workers = len(cluster.get("worker") or []) or tasks
        raise VerifyError(
            f"TF_CONFIG names a cluster of {tasks} tasks: verify would run and stop only this one while the "
            f"others wait or crash. Unset TF_CONFIG and run `mpfix verify --workers {workers} SCRIPT`: verify "
            "starts every worker with its own TF_CONFIG on this machine"
        )


@dataclass
class Report:
    script: Path
    args: list[str]
    options: Options
    mixed: RunResult
    baseline: RunResult | None
    verdict: Verdict
    location: Location | None = None
    located_run: RunResult | None = None
    escalation: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def keras(self) -> int | None:
        generations = self.mixed.keras or (self.baseline.keras if self.baseline else [])
        return max(generations) if generations else None


@dataclass
class BeforeAfter:
    before: Report
    after: Report

    @property
    def exit_code(self) -> int:
        return self.after.exit_code


def run_children(
    script: Path,
    args,
    modes: list[tuple[str, bool]],
    options: Options,
    workdir: Path,
    origin: Path | None = None,
    outputs: Outputs | None = None,
) -> list[RunResult | None]:
    """Run children (``(mode, locate)`` pairs), ``options.jobs`` at a time. Once a run has
    timed out, the runs not started yet are not started (None): a timeout must not cost
    twice. ``outputs`` records what each run wrote into its working directory."""
    results: dict[int, RunResult | None] = {}
    queue = list(enumerate(modes))
    running: list[tuple[int, Child]] = []
    if outputs is None:
        outputs = Outputs((origin or script).parent)
    try:
        while queue or running:
            if any(r is not None and r.timed_out for r in results.values()):
                results.update((index, None) for index, _ in queue)
                queue.clear()
            while queue and len(running) < max(1, options.jobs):
                index, (mode, locate) = queue.pop(0)
                stdin = _stdin_of(workdir, options)
                running.append((index, Child(script, args, mode, options, workdir, locate, origin, stdin)))
                if len(running) > 1:
                    for _, child in running:
                        child.concurrent = True
            time.sleep(0.1)
            for item in list(running):
                index, child = item
                if options.progress is not None:
                    line = child.progress_line()
                    if line:
                        options.progress(line)
                child.watch_followed()
                if child.poll():
                    running.remove(item)
                    results[index] = child.result()
                    outputs.after(child.mode, concurrent=bool(running) or child.concurrent)
                    raise_if_no_gpu(results[index])
    finally:
        for _, child in running:
            child.kill()
    return [results[i] for i in range(len(modes))]


_STDINS: dict = {}


def _stdin_of(workdir: Path, options: Options) -> Stdin | None:
    """One reader of this process's stdin per verify (shared by its runs), when asked."""
    if options.stdin != "forward":
        return None
    root = workdir if workdir.name.startswith("mpfix-verify-") else workdir.parent
    if root not in _STDINS:
        _STDINS.clear()  # an earlier verify's folder is gone
        _STDINS[root] = Stdin(root)
    return _STDINS[root]


def _check_script(script: Path) -> None:
    if not script.is_file():
        from mpfix.safe_read import special_kind

        kind = special_kind(script)  # a FIFO, a device: never run (reading it could block forever)
        raise VerifyError(f"{script}: not a script verify can run ({kind})" if kind else f"no such script: {script}")


def _runnable(script: Path, workdir: Path) -> Path:
    """The file the child runs: the script itself, or a notebook's code cells as one."""
    if script.suffix == ".ipynb":
        from mpfix.verify.notebook import notebook_script

        return notebook_script(script, workdir)
    return script


def verify(script, args=(), **kwargs) -> Report:
    options = Options.from_kwargs(**kwargs)
    script = Path(script).resolve()
    _check_script(script)
    with _cleanup_on_signals(), tempfile.TemporaryDirectory(prefix="mpfix-verify-") as tmp:
        return _verify_in(script, list(args), options, Path(tmp), baseline_run=None)


def _verify_in(script: Path, args: list[str], options: Options, workdir: Path, baseline_run) -> Report:
    runnable = _runnable(script, workdir)
    modes = [("mixed", False)]
    if options.baseline and baseline_run is None:
        modes.append(("float32", False))
    outputs = Outputs(script.parent)
    if options.workers > 1:
        from mpfix.verify.workers import run_groups

        runs = run_groups(runnable, args, [mode for mode, _ in modes], options, workdir, script, outputs)
    else:
        runs = run_children(runnable, args, modes, options, workdir, origin=script, outputs=outputs)
    mixed = runs[0]
    baseline = runs[1] if len(runs) > 1 else baseline_run
    skipped_baseline = len(runs) > 1 and baseline is None
    verdict = judge(mixed, baseline, script, baseline_expected=options.baseline)
    verdict = _with_static_rule(verdict, mixed, baseline, script, options)
    if options.workers > 1 or mixed.workers:  # --workers, or the workers of a launcher
        from mpfix.verify.workers_judge import explain

        verdict = explain(verdict, mixed, baseline, script)
    if skipped_baseline:
        verdict.notes.append("the float32 baseline was not run: the mixed run timed out")
    verdict.notes.extend(outputs.notes())
    report = Report(script, args, options, mixed, baseline, verdict)
    if options.locate and verdict.name == "non-finite":
        from mpfix.verify.locate import locate_from_evidence, locate_from_run

        # The per-op evidence of the traced step names the op already: no eager re-run.
        report.location = locate_from_evidence(report)
        if report.location is None:
            located = run_children(runnable, args, [("mixed", True)], options, workdir, origin=script)[0]
            report.located_run = located
            report.location = locate_from_run(located, script)
    from mpfix.verify.escalate import escalation

    report.escalation = escalation(report)
    if options.workers > 1:  # --locate re-runs one process: not offered for a group
        report.escalation = [line for line in report.escalation if "--locate" not in line]
    return report


def _with_static_rule(verdict: Verdict, mixed: RunResult, baseline, script: Path, options: Options) -> Verdict:
    """An at-risk layer: the rule mpfix's static check reports on the line that built it
    (e.g. MP205 on a float16 output head), judged again with it."""
    evidence = verdict.evidence
    if verdict.name != "at-risk" or evidence.get("kind") != "headroom" or not evidence.get("file"):
        return verdict
    from mpfix.verify.locate import matching_rule

    rule, message = matching_rule(Path(evidence["file"]), int(evidence.get("line") or 0))
    layer = mixed.layers.get(evidence.get("layer_index"))
    if not rule or layer is None:
        return verdict
    layer["rule"], layer["rule_message"] = rule, message
    return judge(mixed, baseline, script, baseline_expected=options.baseline)


def before_after(original, patched, args=(), **kwargs) -> BeforeAfter:
    """Verify ``original`` and ``patched`` with the same options and arguments."""
    options = Options.from_kwargs(**kwargs)
    original, patched = Path(original).resolve(), Path(patched).resolve()
    for path in (original, patched):
        _check_script(path)
    with _cleanup_on_signals(), tempfile.TemporaryDirectory(prefix="mpfix-verify-") as tmp:
        after_dir, before_dir = Path(tmp) / "after", Path(tmp) / "before"
        after_dir.mkdir()
        before_dir.mkdir()
        after = _verify_in(patched, list(args), options, after_dir, None)
        before = _verify_in(original, list(args), options, before_dir, after.baseline)
    return BeforeAfter(before, after)
