"""``mpfix repair``: the loop a careful engineer runs, automated and bounded.

1. Verify the script (mixed beside float32). Healthy: nothing is changed, nothing written.
2. Apply the static fixes (safe and unsafe) to the files the run used that have findings
   (the static analysis is told the policy and Keras generation the run used), and verify
   again; kept only if the verdict improves, like every other change. A script whose float32
   run crashed too (an API the installed Keras lacks) has no baseline to compare with: each
   file's static fixes are tried alone, kept when both runs of the fixed script finish and the
   mixed one is better beside that float32 run, which becomes the baseline.
3. While the verdict is not healthy (at most ``max_rounds`` rounds, ``timeout`` seconds in
   all): from the runtime evidence of the last run, try the candidates of
   ``candidates.for_verdict`` one by one on a working copy of the script's folder, each
   verified (mixed run) beside the float32 baseline of the original; keep the first whose
   verdict is better and whose final loss agrees with float32 (``verdict.diverged``), or
   that moved a NaN downstream (the op that created it no longer does, a later one does:
   ``evidence.moved_downstream``); such progress is dropped again unless the final verdict
   is better than the first.
4. Drop every kept change whose removal still leaves the verdict healthy (minimal diff),
   then run the float32 baseline of the result: a change that makes float32 differ from
   the original's float32 run is dropped, unless the original's float32 run was non-finite in
   float16 data the script cast itself and the change (a ``DATA_CAST``) made it finite.
5. Write the kept changes in place as ``mpfix apply`` does (the fix validation, the file's
   encoding/BOM/newlines, ``writer.write_atomic``); ``diff_only`` writes nothing.

The working copy (``Workspace``) mirrors the script's folder in a temporary folder: Python
files and notebooks are copied (so changes never touch the user's files before step 5), everything
else is linked. The children are verify's (``run.run_children``): each enforces its
deadline itself and its whole process group is killed when it ends.
"""

from __future__ import annotations

import functools
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mpfix.verify import candidates as candidates_mod
from mpfix.verify import layer_losses, missing_kernel, repair_checks, repair_progress
from mpfix.verify.changes import Change, ChangeKind, static_findings, static_fixed
from mpfix.verify.evidence import moved_downstream
from mpfix.verify.repair_progress import PROGRESS, Outcome
from mpfix.verify.repair_workspace import Workspace, compose, problem
from mpfix.verify.verdict import judge


class RepairError(Exception):
    """A problem with the request (missing script, unusable folder)."""


@dataclass
class Trial:
    change: Change
    verdict: str
    kept: bool
    reason: str

    def to_json(self) -> dict:
        return {**self.change.to_json(), "verdict_after": self.verdict, "kept": self.kept, "reason": self.reason}


@dataclass
class RepairResult:
    script: Path
    before: Outcome
    after: Outcome
    baseline: object  # RunResult of the original's float32 run
    changes: list[Change] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    texts: dict = field(default_factory=dict)  # user path -> (old text, new text)
    written: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    runs: int = 0
    findings: list = field(default_factory=list)  # runtime findings of the original run

    @property
    def exit_code(self) -> int:
        return self.after.verdict.exit_code


# A trial whose loss scale was still warming up when its run ended is judged again over this many times the steps.
WARM_UP_STEPS = 4


class Repairer:
    def __init__(self, script: Path, args: list[str], options: dict, max_rounds: int, timeout: float,
                 progress=None, run_timeout: float = 600.0) -> None:
        from mpfix.verify.run import Options

        self.script = Path(script).resolve()
        self.args = list(args)
        self.max_rounds = max_rounds
        self.deadline = time.monotonic() + timeout
        self.per_run = float(run_timeout)
        self.options = Options.from_kwargs(**options, baseline=True)
        self.progress = progress or (lambda line: None)
        self.runs = 0
        # Scripts made of a notebook's cells -> the user's notebook.
        self.generated: dict[str, Path] = {}
        # The original's float32 runs over more steps than asked, by step count (``_baseline_over``).
        self.baselines: dict = {}

    def to_original(self, workspace: Workspace, path: Path) -> Path:
        return self.generated.get(str(path)) or workspace.original(path)

    def _left(self) -> float:
        return self.deadline - time.monotonic()

    def _run(self, workspace: Workspace, tmp: Path, modes, steps: int | None = None) -> list:
        from dataclasses import replace

        from mpfix.verify.run import run_children

        left = self._left()
        if left < 5:
            raise TimeoutError
        options = replace(self.options, timeout=min(self.per_run, left), steps=steps or self.options.steps)
        workdir = Path(tempfile.mkdtemp(prefix="run-", dir=tmp))
        self.runs += len(modes)
        script = workspace.mirror(self.script)
        runnable = script
        if script.suffix == ".ipynb":
            from mpfix.verify.notebook import notebook_script

            runnable = notebook_script(script, workdir)
            self.generated[str(runnable)] = self.script
        if options.workers > 1:
            # --workers N: each run is a MultiWorkerMirroredStrategy group of N workers, judged as one (the workers'
            # per-op evidence merged: the op line of an overflow on one worker's shard only).
            from mpfix.verify.outputs import Outputs
            from mpfix.verify.workers import run_groups

            return run_groups(runnable, self.args, [mode for mode, _ in modes], options, workdir, script,
                              Outputs(script.parent))
        return run_children(runnable, self.args, modes, options, workdir, origin=script)

    def outcome(self, workspace, tmp, baseline, steps: int | None = None) -> Outcome:
        mixed = self._run(workspace, tmp, [("mixed", False)], steps)[0]
        return Outcome(judge(mixed, baseline, workspace.mirror(self.script), baseline_expected=True), mixed)

    def run(self) -> RepairResult:
        # SIGTERM/SIGHUP: verify's handler kills the children and lets the temporary
        # folder go before mpfix exits (nothing is written: writing comes after).
        from mpfix.verify.run import _cleanup_on_signals

        start = time.monotonic()
        with _cleanup_on_signals(), tempfile.TemporaryDirectory(prefix="mpfix-verify-repair-") as name:
            tmp = Path(name)
            try:
                workspace = Workspace(self.script.parent, tmp)
            except OSError as exc:
                raise RepairError(f"{self.script.parent}: cannot make the working copy of this folder "
                                  f"({exc.strerror or exc}: {exc.filename})") from None
            result = self._repair(workspace, tmp)
        result.elapsed = time.monotonic() - start
        result.runs = self.runs
        return result

    def _repair(self, workspace: Workspace, tmp: Path) -> RepairResult:
        self.progress("verifying the script as it is (mixed and float32)")
        try:
            mixed, baseline = self._run(workspace, tmp, [("mixed", False), ("float32", False)])
        except TimeoutError:
            raise RepairError("--timeout is too short for even one run") from None
        first = Outcome(judge(mixed, baseline, workspace.mirror(self.script), baseline_expected=True), mixed)
        result = RepairResult(self.script, first, first, baseline)
        result.findings = [self._user_finding(f, workspace) for f in _with_static_codes(mixed)]
        if first.verdict.name == "healthy":
            return result
        mix = candidates_mod.crash_mix(first.verdict)
        if first.verdict.name == "crashed" and mix is None and not repair_checks.usable(baseline):
            # The float32 run crashed too (an API the installed Keras lacks, a strategy mixed up): no
            # numerics to compare; the static fixes are tried, each proven by both runs of the fixed script.
            baseline = self._crash_static_stage(workspace, tmp, result)
            if baseline is None:
                return result
            first_after, kept = result.after, list(result.changes)
        elif first.verdict.name in ("crashed", "timeout", "no-steps") and mix is None and \
                not layer_losses.read(first.verdict.evidence.get("message") or "") and \
                not missing_kernel.read(first.verdict.evidence.get("message")):
            result.notes.append(f"nothing to repair: the script's verdict is {first.verdict.name}")
            return result
        else:
            first_after, kept = first, []
        if baseline is None or not repair_checks.usable(baseline):
            result.notes.append("the float32 baseline did not run cleanly: no change can be judged against it")
            return result
        current = first_after
        checked = False
        try:
            if not kept:  # (a crash's stage already applied the static fixes)
                current, kept = self._static_stage(workspace, tmp, baseline, current, kept, result)
            rounds = 0
            while current.verdict.name != "healthy" and rounds < self.max_rounds:
                rounds += 1
                found = _with_static_codes(current.run)
                if not found and current.verdict.name == "non-finite":
                    found = self._located(workspace, tmp, current.run)
                to_original = functools.partial(self.to_original, workspace)
                files = self._files(workspace, current.run)
                offered = candidates_mod.for_crash(current.verdict, _ran_text, to_original, files) + \
                    candidates_mod.for_missing_kernel(current.verdict, current.run, _ran_text, to_original) + \
                    candidates_mod.for_verdict(
                        current.verdict, current.run, found, _ran_text, files, to_original)
                tried = len(result.trials)
                better = self._try(workspace, tmp, baseline, current, kept, offered, result)
                if better is None:
                    if len(result.trials) == tried:
                        result.notes.append(_nothing_to_try(found, current.verdict))
                    break
                current, kept = better
            if current.verdict.name == "healthy" and len(kept) > 1:
                current, kept = self._minimise(workspace, tmp, baseline, current, kept)
            if kept:
                count = len(kept)
                kept = self._float32_agrees(workspace, tmp, baseline, kept, result)
                checked = True
                if len(kept) != count:
                    workspace.set(compose(workspace, kept) or {})
                    current = self.outcome(workspace, tmp, baseline) if kept else first
        except TimeoutError:
            if kept and not checked:
                # Never keep a change whose float32 run was not compared with the original's.
                result.notes.append("stopped: --timeout reached before the float32 check; nothing is kept")
                kept, current = [], first
            else:
                result.notes.append("stopped: --timeout reached; the changes kept so far are the result")
        unproven = repair_progress.unproven(kept, current, first)
        if unproven is not None:
            result.notes.append(unproven)
            kept, current = [], first
        texts = compose(workspace, kept) or {}
        result.after = current
        result.baseline = current.baseline or baseline  # the float32 run the final state was judged beside
        result.changes = kept
        result.texts = {p: (workspace.text(p), t) for p, t in texts.items() if workspace.text(p) != t}
        return result

    def _user_finding(self, finding, workspace):
        from mpfix.verify.frames import notebook_place

        place = notebook_place(finding.file, finding.line)
        if place is not None and place[1]:
            _, cell, line = place
            finding.extra["cell"], finding.line = cell, line
        finding.file = str(self.to_original(workspace, Path(finding.file)))
        return finding

    def _files(self, workspace: Workspace, run) -> list[Path]:
        """The user's files the run used: the script, and the project modules that built
        float16 layers or ops."""
        found = [self.script]
        for entry in [*run.layers.values(), *run.ops, *run.constants]:
            path = entry.get("file")
            if path:
                original = self.to_original(workspace, Path(path))
                if original not in found and workspace.text(original) is not None:
                    found.append(original)
        return found

    def _located(self, workspace, tmp, failed=None) -> list:
        """An eager step has no per-op evidence: the op ``--locate``'s re-run finds."""
        from mpfix.verify.repair_locate import located

        if self.options.workers > 1:
            return []  # an eager re-run is one process: a group's op lines come from its workers' evidence
        self.progress("locating the first op that gave NaN/Inf (an eager re-run)")
        run = self._run(workspace, tmp, [("mixed", True)])[0]
        return located(run, workspace.mirror(self.script), _ran_text, failed.layers if failed is not None else None)

    def _static_changes(self, workspace, run, why: str = ""):
        """One change per file the run used that has static fixes (safe and unsafe), the static analysis told the
        run's policy and Keras generation; ``why`` ends the evidence. Notebooks are left to `mpfix apply`."""
        policy, keras = candidates_mod.policy_of(run), candidates_mod.keras_of(run)
        for path in self._files(workspace, run):
            text = workspace.text(path)
            if path.suffix == ".ipynb" or text is None or \
                    static_fixed(text, path, ("MP",), None, policy, None, keras) is None:
                continue
            codes = sorted({f.code for f in static_findings(text, path, policy, keras) if f.fixable(True)})
            told = f" (checked under the run's {policy} policy, Keras {keras})" if policy else ""
            yield Change(ChangeKind.STATIC, path, "the static fixes (safe and unsafe) of this file",
                         f"static findings {', '.join(codes) or 'with fixes'} in {path.name}{told}{why}",
                         codes=("MP",), policy=policy, keras=keras)

    def _static_stage(self, workspace, tmp, baseline, current, kept, result):
        for change in list(self._static_changes(workspace, current.run)):
            better = self._try(workspace, tmp, baseline, current, kept, [change], result)
            if better is not None:
                current, kept = better
        return current, kept

    def _crash_static_stage(self, workspace, tmp, result):
        """The static fixes of each file the crashed run used, tried one file at a time: kept when both runs of the
        fixed script finish and the mixed one is better than crashed beside that float32 run (its new baseline, which
        is returned; None when no fix ends the crash)."""
        why = "; the float32 run crashed too, so the fixed script's own float32 run is the baseline"
        for change in list(self._static_changes(workspace, result.before.run, why)):
            texts = compose(workspace, [change])
            reason = next((why for p, t in (texts or {}).items() if (why := problem(p, workspace.text(p), t))), None)
            if not texts or reason is not None:
                result.trials.append(Trial(change, "-", False, f"fails validation: {reason}"))
                continue
            self.progress(f"trying {change.kind}: {change.description}")
            workspace.set(texts)
            mixed, baseline = self._run(workspace, tmp, [("mixed", False), ("float32", False)])
            outcome = Outcome(judge(mixed, baseline, workspace.mirror(self.script), baseline_expected=True), mixed)
            if repair_checks.usable(baseline) and outcome.rank > result.before.rank:
                change.verdict = outcome.verdict.name
                result.trials.append(Trial(change, outcome.verdict.name, True, "the crash is gone in both runs"))
                result.after, result.changes, result.baseline = outcome, [change], baseline
                return baseline
            result.trials.append(Trial(change, outcome.verdict.name, False, "the fixed script still crashes"))
            workspace.set({})
        result.notes.append("nothing to repair: the script crashed in float32 too, and no static fix ends the crash")
        return None

    def _try(self, workspace, tmp, baseline, current, kept, offered, result):
        for change in offered:
            texts = compose(workspace, [*kept, change])
            if texts is None or all(workspace.text(p) == t for p, t in texts.items()):
                continue
            reason = next((why for p, t in texts.items()
                           if (why := problem(p, workspace.text(p), t)) is not None), None)
            if reason is not None:
                result.trials.append(Trial(change, "-", False, f"fails validation: {reason}"))
                continue
            self.progress(f"trying {change.kind}: {change.description}")
            workspace.set(texts)
            outcome, longer, agrees = self._judged(workspace, tmp, baseline, texts, str(change.kind))
            steps = WARM_UP_STEPS * self.options.steps
            better = outcome.rank > current.rank
            moved = not better and outcome.verdict.name == current.verdict.name == "non-finite" and \
                moved_downstream(current.run, outcome.run)
            # A cast that ends a dtype-mix crash is progress even before the loss agrees: the
            # next round repairs what the run then shows (an overflow the crash hid).
            uncrashed = change.kind is ChangeKind.CAST and better and outcome.verdict.name not in ("timeout", "no-steps")
            into_gradients = not agrees and repair_progress.into_gradients(current, outcome)
            kernel = repair_progress.kernel_crash_moved(current, outcome)
            if (better and agrees) or moved or uncrashed or into_gradients or kernel:
                change.verdict = outcome.verdict.name
                if into_gradients or kernel:
                    change.extra[PROGRESS] = "gradients" if into_gradients else "kernel"
                why = ("verdict improved" if agrees else "the run no longer crashes") if better else \
                    "the op that created the first NaN/Inf no longer does; the next one is later in the step"
                if into_gradients:
                    why = "every loss is finite now; the overflow moved into the gradients (every update skipped)"
                elif kernel:
                    why = "the op without a float16 kernel runs in float32; the run now crashes later, where float32 " \
                          "meets float16"
                result.trials.append(Trial(change, outcome.verdict.name, True, why + longer))
                return outcome, [*kept, change]
            why = "the final loss differs from float32's" if better else "the verdict did not improve"
            if better and longer and not repair_checks.enough_updates(outcome.run, self.options.steps):
                why = f"the loss scale was still warming up at {self.options.steps} steps, and over {steps} too few " \
                      "updates were applied to compare with float32"
            result.trials.append(Trial(change, outcome.verdict.name, False, why))
        workspace.set(compose(workspace, kept) or {})
        return None

    def _judged(self, workspace, tmp, baseline, texts: dict, what: str):
        """(outcome, why it was judged longer or "", whether it agrees with float32) of the working copy holding
        ``texts``. A run whose every step was skipped by a scale still falling from its start is judged again over
        4x the steps (a first update can overshoot and start a second descent: leaky_scan's took 11 + 10 skips),
        beside the original's float32 run over as many steps (the baseline's 10 losses pair with none of the updates
        applied after the warm-up: gram_texture_k3's float32 GramDescriptor was "diverged" beside them, healthy
        beside 18 float32 steps); it agrees only with enough updates applied there to compare."""
        outcome = self.outcome(workspace, tmp, baseline)
        if not (outcome.verdict.name == "stalled" and repair_checks.warming_up(outcome.run)):
            return outcome, "", repair_checks.agrees(outcome.run, baseline)
        steps = WARM_UP_STEPS * self.options.steps
        self.progress(f"the loss scale is still warming up: {what} again over {steps} steps")
        beside = self._baseline_over(workspace, tmp, steps, texts) or baseline
        outcome = self.outcome(workspace, tmp, beside, steps)
        outcome.baseline = beside
        agrees = repair_checks.agrees(outcome.run, beside) and \
            repair_checks.enough_updates(outcome.run, self.options.steps)
        return outcome, f" (judged over {steps} steps: the loss scale was still warming up at {self.options.steps})", \
            agrees

    def _baseline_over(self, workspace, tmp, steps: int, texts: dict):
        """The original script's float32 run over ``steps`` (once per count), the working copy then set back to
        ``texts``; None when it did not run cleanly."""
        if steps not in self.baselines:
            workspace.set({})
            try:
                run = self._run(workspace, tmp, [("float32", False)], steps)[0]
            finally:
                workspace.set(texts)
            self.baselines[steps] = run if repair_checks.usable(run) else None
        return self.baselines[steps]

    def _minimise(self, workspace, tmp, baseline, current, kept):
        for change in list(reversed(kept)):
            if len(kept) == 1:
                break
            rest = [c for c in kept if c is not change]
            texts = compose(workspace, rest)
            if texts is None:
                continue
            self.progress(f"without {change.kind}: {change.description}")
            workspace.set(texts)
            # Judged as the trials were (a change can be needless only once the warm-up is over: gram_texture_k3's
            # island kept as progress, then its layer in float32, which alone is healthy after 10 skipped steps).
            outcome, _, agrees = self._judged(workspace, tmp, baseline, texts, "the rest")
            if outcome.verdict.name == "healthy" and agrees:
                kept, current = rest, outcome
        return current, kept

    def _float32_agrees(self, workspace, tmp, baseline, kept, result) -> list[Change]:
        """Drop changes (newest first) until the float32 run of the result agrees with the
        original's: a repair must not change what float32 computes."""
        while kept:
            workspace.set(compose(workspace, kept) or {})
            self.progress("float32 run of the repaired script")
            f32 = self._run(workspace, tmp, [("float32", False)])[0]
            if f32 is not None and (repair_checks.same_float32(f32, baseline)
                                    or repair_checks.float32_repaired(f32, baseline, kept)):
                return kept
            dropped = kept.pop()
            result.notes.append(f"dropped {dropped.kind} ({dropped.description}): the float32 run changed")
        return kept


def _with_static_codes(run) -> list:
    """The run's runtime findings, a static finding on the same line giving its code (MP201
    on a -1e9 constant)."""
    from mpfix.verify import evidence

    found = evidence.findings(run)
    if found:
        found = evidence.findings(run, evidence.static_codes(sorted({f.file for f in found})))
    return found


def _nothing_to_try(found, verdict=None) -> str:
    """Why a round ended without a trial: no candidate change could be written."""
    frame = (verdict.evidence.get("frame") or {}) if verdict is not None and verdict.name == "crashed" else {}
    if frame.get("file") and frame.get("line"):
        return (f"no cast could be written at {Path(frame['file']).name}:{frame['line']}, where float16 and float32 "
                "meet: that line needs a fix by hand")
    where = [f"{Path(f.file).name}:{f.line}:{f.column} (`{f.op}`)" for f in found[:2] if f.line]
    if not where:
        return ("the run located no op to change (ops are measured one by one inside tf.function and "
                "Keras steps): `mpfix verify --locate` finds the first op that gave NaN/Inf")
    return f"no candidate change could be written at {', '.join(where)}: that line needs a fix by hand"


def _ran_text(path: Path) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def repair(script, args=(), *, max_rounds: int = 4, timeout: float = 1800.0, progress=None,
           run_timeout: float = 600.0, **options) -> RepairResult:
    """Repair ``script`` (see the module docstring); nothing is written here (``write``).
    ``options`` are verify's (steps, seed, device, python, jobs, env)."""
    script = Path(script)
    if not script.is_file():
        from mpfix.safe_read import special_kind

        kind = special_kind(script)
        raise RepairError(f"{script}: not a script repair can run ({kind})" if kind else f"no such script: {script}")
    return Repairer(script, list(args), dict(options), max_rounds, timeout, progress, run_timeout).run()


def write(result: RepairResult) -> list[str]:
    """Write the repaired files in place, as ``mpfix apply`` writes fixes; returns errors."""
    from mpfix import safe_read
    from mpfix.source import SourceError, decode
    from mpfix.writer import ChangedError, ReadOnlyError, write_atomic

    errors = []
    for path, (old, new) in sorted(result.texts.items()):
        try:
            raw = safe_read.read_bytes(path, follow_outside=True)
            source = decode(raw)
        except (OSError, SourceError) as exc:
            errors.append(f"{path}: cannot read it again ({exc}); nothing was written")
            continue
        if source.text != old:
            errors.append(f"{path}: changed while repair ran; nothing was written")
            continue
        reason = problem(path, old, new)
        if reason is not None:
            errors.append(f"{path}: {reason}; nothing was written")
            continue
        try:
            write_atomic(path, source.encode(new), expected=raw)  # re-checked just before the replace
            result.written.append(path)
        except ChangedError:
            errors.append(f"{path}: changed while repair ran; nothing was written")
        except ReadOnlyError:
            errors.append(f"{path}: file is read-only; nothing was written")
        except (OSError, UnicodeEncodeError) as exc:
            errors.append(f"{path}: {exc}; nothing was written")
    result.errors.extend(errors)
    return errors
