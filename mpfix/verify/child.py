"""Parent side: one child process of verify (the script under the bootstrap), in its own
session so that its whole process group can be killed; no TensorFlow here.

``run`` starts one child per run (mixed, float32, --locate), ``workers`` one per worker of
a group. The child enforces its deadline itself; ``Child.poll`` is the backstop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from mpfix.verify.kinds import VerifyError
from mpfix.verify.records import RunResult, parse_run, read_events
from mpfix.verify.stdin import Stdin
from mpfix.verify.workers_judge import failed, merge


def failed_any(runs: list[RunResult]) -> bool:
    return any(failed(run) for run in runs)

# The bootstrap's exit status when --device gpu finds no GPU.
EXIT_NO_GPU = 3
# SIGTERM first so TensorFlow can release the device; SIGKILL after this grace period.
KILL_GRACE_S = 3.0
# The child enforces --timeout itself (and reads its last rows); the parent kills it only
# when it has not ended this long after that.
PARENT_DEADLINE_MARGIN_S = KILL_GRACE_S + 2.0
# A peer of a failed worker gets this long to end by itself before it is halted.
PEER_GRACE_S = 3.0

def _package_root() -> str:
    # mpfix may not be installed for the child's interpreter (--python): put the folder
    # holding the package first on its path.
    return str(Path(__file__).resolve().parents[2])


def child_env(options) -> dict:
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


class Child:
    """One running child process, in its own session so the whole group can be killed."""

    def __init__(
        self,
        script: Path,
        args,
        mode: str,
        options,
        workdir: Path,
        locate: bool,
        origin: Path | None = None,
        stdin: Stdin | None = None,
        worker: int | None = None,
        env: dict | None = None,
    ) -> None:
        self.mode = mode
        self.options = options
        self.worker = worker
        name = f"{mode}{'-locate' if locate else ''}{'' if worker is None else f'-w{worker}'}"
        self.name = name
        # Followed workers of a launcher (watch_followed).
        self.follow_halted: str | None = None
        self._follow_sizes: list[int] = []
        self._follow_progress = time.monotonic()
        self._follow_stepped = False
        self._follow_failed = 0.0
        self._follow_ends: list = []
        self.records = workdir / f"{name}.jsonl"
        # --workers: the parent stops this worker by creating this file (see _bootstrap).
        self.halt_path = workdir / f"{name}.halt"
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
            "worker": worker,
            "halt": str(self.halt_path),
        }
        config_path = workdir / f"{name}.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        self.stdout = open(workdir / f"{name}.stdout", "wb")
        self.stderr_path = workdir / f"{name}.stderr"
        self.stderr = open(self.stderr_path, "wb")
        self.started = time.monotonic()
        self.timed_out = False
        self.proc = subprocess.Popen(
            [options.python, "-m", "mpfix.verify._bootstrap", "--config", str(config_path)],
            cwd=str(origin.parent),
            env={**child_env(options), **(env or {}), **self._follow_env(workdir, config, name, worker, locate)},
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

    def _follow_env(self, workdir: Path, config: dict, name: str, worker, locate: bool) -> dict:
        """The environment that makes the workers a launcher script starts run under the
        bootstrap too (``_follow``); not for workers verify starts itself, nor --locate."""
        if worker is not None or locate:
            return {}
        folder = workdir / "follow"
        folder.mkdir(exist_ok=True)
        (folder / "sitecustomize.py").write_text("from mpfix.verify._follow import main\n\nmain()\n", encoding="utf-8")
        template = workdir / f"{name}.follow.json"
        template.write_text(json.dumps(dict(config, name=name)), encoding="utf-8")
        base = child_env(self.options).get("PYTHONPATH", "")
        return {"PYTHONPATH": os.pathsep.join(p for p in (base, str(folder)) if p), "MPFIX_VERIFY_FOLLOW": str(template)}

    def watch_followed(self) -> None:
        """A launcher's followed workers are a group too: when one fails or they hang, the
        others are halted (as ``workers.run_group`` does), so the launcher ends."""
        if self.worker is not None or self.follow_halted is not None:
            return
        paths = [self.records.with_name(f"{self.name}-w{i}.jsonl") for i in range(64)]
        paths = paths[: next((i for i, p in enumerate(paths) if not p.exists()), len(paths))]
        if not paths:
            return
        now = time.monotonic()
        sizes = [p.stat().st_size for p in paths]
        if sizes != self._follow_sizes:  # read the files only when they grew
            self._follow_sizes, self._follow_progress = sizes, now
            self._follow_stepped = self._follow_stepped or any('"event": "step"' in p.read_text(errors="replace") for p in paths)
            self._follow_ends = [next((e for e in read_events(p) if e.get("event") == "end"), None) for p in paths]
        ends = self._follow_ends
        bad = [i for i, e in enumerate(ends) if e and (e.get("status") == "crashed" or (e.get("status") == "exit" and e.get("code")))]
        if bad:
            self._follow_failed = self._follow_failed or now
        reason = None
        if bad and now - self._follow_failed >= PEER_GRACE_S:
            reason = f"peer failed: worker {bad[0]}"
        elif self._follow_stepped and now - self._follow_progress >= self.options.hang_after:
            reason = f"hang: no worker recorded a step for {self.options.hang_after:g} s"
        if reason:
            self.follow_halted = reason
            for i, end in enumerate(ends):
                if end is None:
                    self.records.with_name(f"{self.name}-w{i}.halt").write_text(reason, encoding="utf-8")

    def followed(self) -> list[RunResult]:
        """The runs of the workers a launcher script started (``_follow``), by index."""
        runs = []
        for index in range(64):
            records = self.records.with_name(f"{self.name}-w{index}.jsonl")
            if not records.exists():
                break
            run = parse_run(self.mode, read_events(records))
            run.timed_out = (run.end or {}).get("status") == "timeout"
            runs.append(run)
        return runs

    def halt(self, reason: str) -> None:
        """Ask the child to stop (its watchdog reads its last rows and writes where its
        main thread is, within 0.2 s); ``kill`` is the backstop."""
        try:
            self.halt_path.write_text(reason, encoding="utf-8")
        except OSError:
            pass

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
        workers = self.followed() if self.worker is None else []
        if workers and not run.steps:
            # A launcher: its workers' runs, judged as one; the launcher's own failure
            # counts when no worker failed.
            group = merge(self.mode, workers, list(range(len(workers))))
            group.launches, group.elapsed, group.halted = run.launches, run.elapsed, self.follow_halted
            group.timed_out = group.timed_out or run.timed_out or (self.follow_halted or "").startswith("hang")
            if group.crash is None and (failed(run) and not failed_any(workers)):
                group.crash, group.end, group.returncode, group.stderr_tail = run.crash, run.end, run.returncode, run.stderr_tail
            return group
        return run


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def raise_if_no_gpu(run: RunResult) -> None:
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
