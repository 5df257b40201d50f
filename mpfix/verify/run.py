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
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from mpfix.verify.kinds import Location, VerifyError  # re-exported: callers import them from here
from mpfix.verify.outputs import Outputs
from mpfix.verify.records import RunResult, parse_run, read_events
from mpfix.verify.stdin import Stdin
from mpfix.verify.verdict import Verdict, judge

POLICIES = ("script", "mixed_float16", "mixed_bfloat16")
DEVICES = ("auto", "cpu", "gpu")
STDIN_MODES = ("devnull", "forward")
# The bootstrap's exit status when --device gpu finds no GPU.
EXIT_NO_GPU = 3
# SIGTERM first so TensorFlow can release the device; SIGKILL after this grace period.
KILL_GRACE_S = 3.0
# The child enforces --timeout itself (and reads its last rows); the parent kills it only
# when it has not ended this long after that.
PARENT_DEADLINE_MARGIN_S = KILL_GRACE_S + 2.0
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
        if options.steps < 1:
            raise VerifyError("--steps must be at least 1")
        return options


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


def _package_root() -> str:
    # mpfix may not be installed for the child's interpreter (--python): put the folder
    # holding the package first on its path.
    return str(Path(__file__).resolve().parents[2])


def child_env(options: Options) -> dict:
    env = dict(os.environ)
    env.update(options.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
    if options.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = "-1"
    if options.jobs > 1:
        # Two TensorFlow processes on one GPU: each would otherwise reserve all memory.
        env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


class _Child:
    """One running child process, in its own session so the whole group can be killed."""

    def __init__(
        self,
        script: Path,
        args,
        mode: str,
        options: Options,
        workdir: Path,
        locate: bool,
        origin: Path | None = None,
        stdin: Stdin | None = None,
    ) -> None:
        self.mode = mode
        self.options = options
        self.records = workdir / f"{mode}{'-locate' if locate else ''}.jsonl"
        origin = origin or script
        config = {
            "script": str(script),
            # What the user asked for (a notebook's converted script runs beside it).
            "origin": str(origin),
            "timeout": options.timeout,
            # What the child removes if mpfix dies without cleaning up (SIGKILL).
            "tempdir": str(workdir if workdir.name.startswith("mpfix-verify-") else workdir.parent),
            "args": list(args),
            "records": str(self.records),
            "mode": "float32" if mode == "float32" else "mixed",
            "policy": options.policy,
            "steps": options.steps,
            "seed": options.seed,
            "locate": locate,
            "device": options.device,
        }
        config_path = workdir / f"{mode}{'-locate' if locate else ''}.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        self.stdout = open(workdir / f"{mode}.stdout", "wb")
        self.stderr_path = workdir / f"{mode}.stderr"
        self.stderr = open(self.stderr_path, "wb")
        self.started = time.monotonic()
        self.timed_out = False
        self.proc = subprocess.Popen(
            [options.python, "-m", "mpfix.verify._bootstrap", "--config", str(config_path)],
            cwd=str(origin.parent),
            env=child_env(options),
            stdin=stdin.for_child() if stdin is not None else subprocess.DEVNULL,
            stdout=self.stdout,
            stderr=self.stderr,
            start_new_session=True,
        )
        if stdin is not None:
            stdin.feed(self.proc)
        self._seen = 0
        self.concurrent = False

    def poll(self) -> bool:
        if self.proc.poll() is not None:
            return True
        # The child stops itself at the timeout (after reading its last rows); this is the
        # backstop for a child that could not.
        if time.monotonic() - self.started > self.options.timeout + PARENT_DEADLINE_MARGIN_S:
            self.timed_out = True
            self.kill()
            return True
        return False

    def kill(self) -> None:
        _kill_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        _kill_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def progress_line(self) -> str | None:
        events = read_events(self.records)
        steps = [e for e in events if e.get("event") == "step"]
        if len(steps) == self._seen or not steps:
            return None
        self._seen = len(steps)
        last = steps[-1]
        return (
            f"[{self.mode}] step {int(last.get('step', 0)) + 1}/{self.options.steps} "
            f"loss {last.get('loss')} scale {last.get('loss_scale')}"
        )

    def result(self) -> RunResult:
        # Whatever the script left running in its group (data loader workers, helpers)
        # goes with it.
        _kill_group(self.proc.pid, signal.SIGKILL)
        self.stdout.close()
        self.stderr.close()
        run = parse_run(self.mode, read_events(self.records))
        run.returncode = self.proc.returncode
        run.timed_out = self.timed_out or (run.end or {}).get("status") == "timeout"
        run.elapsed = time.monotonic() - self.started
        try:
            run.stderr_tail = self.stderr_path.read_bytes()[-4000:].decode("utf-8", "replace")
        except OSError:
            pass
        return run


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


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
    running: list[tuple[int, _Child]] = []
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
                running.append((index, _Child(script, args, mode, options, workdir, locate, origin, stdin)))
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
                if child.poll():
                    running.remove(item)
                    results[index] = child.result()
                    outputs.after(child.mode, concurrent=bool(running) or child.concurrent)
                    _raise_if_no_gpu(results[index])
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


def _raise_if_no_gpu(run: RunResult) -> None:
    for error in run.errors:
        if error.get("kind") == "no-gpu":
            raise VerifyError("--device gpu: no GPU is visible to TensorFlow in the child process")
        if error.get("kind") == "no-tensorflow":
            raise VerifyError(
                f"TensorFlow is not installed for the interpreter {error.get('python')} "
                f"(Python {error.get('version')}) that runs the script: point --python at the "
                "training environment's interpreter, e.g. `mpfix verify train.py --python "
                ".venv/bin/python` (mpfix itself need not be installed there)"
            )


def _check_script(script: Path) -> None:
    if not script.is_file():
        raise VerifyError(f"no such script: {script}")


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
    runs = run_children(runnable, args, modes, options, workdir, origin=script, outputs=outputs)
    mixed = runs[0]
    baseline = runs[1] if len(runs) > 1 else baseline_run
    skipped_baseline = len(runs) > 1 and baseline is None
    verdict = judge(mixed, baseline, script, baseline_expected=options.baseline)
    verdict = _with_static_rule(verdict, mixed, baseline, script, options)
    if skipped_baseline:
        verdict.notes.append("the float32 baseline was not run: the mixed run timed out")
    verdict.notes.extend(outputs.notes())
    report = Report(script, args, options, mixed, baseline, verdict)
    if options.locate and verdict.name == "non-finite":
        from mpfix.verify.locate import locate_from_run

        located = run_children(runnable, args, [("mixed", True)], options, workdir, origin=script)[0]
        report.located_run = located
        report.location = locate_from_run(located, script)
    from mpfix.verify.escalate import escalation

    report.escalation = escalation(report)
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
