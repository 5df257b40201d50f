"""Parent side of ``verify --workers``: the workers' runs judged as one (no TensorFlow).

``merge`` builds the group's run from each worker's: one row per (step, optimizer) with
the workers' rows combined (loss: the first non-finite one, else the mean; skipped when any
worker skipped; zero and non-finite shares averaged; the largest gradient norm and float16
output) and ``nonfinite_where`` naming every (worker, replica) that had a non-finite loss or
gradient at that step. So a NaN on any worker or replica is non-finite at its step, and
``judge`` sees one run. The group crashed when a worker did: its crash (the first failure
that is not a peer's collective abort) is the group's. ``explain`` names the workers in the
verdict (which one was non-finite, crashed, or where each hung).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import statistics

from mpfix.verify.frames import describe
from mpfix.verify.records import RunResult, Step

# Errors a worker gets because a peer failed (not a cause of their own).
_DERIVED = ("Collective ops is aborted", "CancelledError", "UnavailableError", "coordination service", "Socket closed")


def failed(run: RunResult) -> bool:
    """The worker raised, exited non-zero, or died without reporting."""
    end = run.end or {}
    if run.crash is not None or not end:
        return True
    return end.get("status") == "exit" and end.get("code") not in (0, None)


def _derived(run: RunResult) -> bool:
    text = f"{(run.crash or {}).get('type', '')} {(run.crash or {}).get('message', '')}"
    return any(marker in text for marker in _DERIVED)


def _where(worker: int, step: Step) -> list[list[int]]:
    if (step.loss is None or math.isfinite(step.loss)) and step.nonfinite_fraction == 0:
        return []
    replicas = [r for _, r in step.nonfinite_where] or [0]
    return [[worker, r] for r in replicas]


def _merge_rows(rows: list[tuple[int, Step]]) -> Step:
    steps = [s for _, s in rows]
    losses = [s.loss for s in steps if s.loss is not None]
    bad = [x for x in losses if not math.isfinite(x)]
    loss = bad[0] if bad else (statistics.fmean(losses) if losses else None)
    norms = [s.grad_norm for s in steps if s.grad_norm is not None]
    acts = [s for s in steps if s.act_max is not None]
    top = max(acts, key=lambda s: s.act_max if math.isfinite(s.act_max) else math.inf) if acts else None
    first = steps[0]
    return Step(
        step=first.step,
        loss=loss,
        loss_scale=first.loss_scale,
        dynamic=any(s.dynamic for s in steps),
        skipped=any(s.skipped for s in steps),
        nonfinite_fraction=statistics.fmean(s.nonfinite_fraction for s in steps),
        zero_fraction=statistics.fmean(s.zero_fraction for s in steps),
        grad_norm=max(norms) if norms else None,
        optimizer=first.optimizer,
        act_max=top.act_max if top else None,
        act_layer=top.act_layer if top else None,
        t=max((s.t for s in steps if s.t is not None), default=None),
        nonfinite_where=[where for worker, s in rows for where in _where(worker, s)],
    )


def merge(mode: str, runs: list[RunResult], order: list[int]) -> RunResult:
    """The group's run (see the module docstring); ``order``: workers in the order they
    ended."""
    rows: dict[tuple[int, int], list[tuple[int, Step]]] = {}
    for worker, run in enumerate(runs):
        for step in run.steps:
            step.worker = worker
            rows.setdefault((step.step, step.optimizer), []).append((worker, step))
    merged = RunResult(mode=mode, workers=runs)
    merged.steps = [_merge_rows(rows[key]) for key in sorted(rows)]
    lead = runs[0]
    failures = [w for w in order if failed(runs[w])]
    own = [w for w in failures if not _derived(runs[w])]
    cause = runs[(own or failures)[0]] if failures else lead
    merged.start, merged.end, merged.crash = lead.start, cause.end, cause.crash
    merged.returncode, merged.stderr_tail = cause.returncode, cause.stderr_tail
    merged.numerics = lead.numerics
    merged.layers = lead.layers
    # Every worker's per-op evidence (one script: the same ops, lines and layer indices on each; merge_ops keeps
    # an op's earliest non-finite step): an overflow on worker 1's data only is named at its line too.
    merged.ops = [op for run in runs for op in run.ops]
    merged.constants = [c for run in runs for c in run.constants]
    merged.data_casts = [c for run in runs for c in run.data_casts]
    merged.errors = [e for run in runs for e in run.errors]
    merged.elapsed = max(run.elapsed for run in runs)
    merged.timed_out = any(run.timed_out for run in runs)
    return merged


def cause_worker(group: RunResult) -> int | None:
    """The worker whose failure is the group's (None: no worker failed)."""
    for index, run in enumerate(group.workers):
        if run.end is group.end and failed(run):
            return index
    return None


def _place(run: RunResult, script) -> str:
    """Where a halted or timed-out worker's main thread was."""
    end = run.end or {}
    user = end.get("user_frame")
    at = f" at {describe(user, script)}" if user else ""
    if end.get("in_tensorflow"):
        return f"waiting inside TensorFlow (a collective or a step){at}"
    if user:
        return f"in your code{at}"
    return ""


def _last_nonfinite(group: RunResult) -> tuple[int, int, str] | None:
    """(worker, step, what) of the last non-finite value any worker saw."""
    found = None
    for worker, run in enumerate(group.workers):
        for s in run.steps:
            if s.loss is not None and not math.isfinite(s.loss):
                what = "loss"
            elif s.nonfinite_fraction > 0:
                what = "gradients"
            else:
                continue
            if found is None or s.step >= found[1]:
                found = (worker, s.step, what)
    return found


def _first_nonfinite(run: RunResult) -> int | None:
    """The first step at which ``run`` (one worker's) had a non-finite loss or gradient."""
    return min((s.step for s in run.steps if not s.loss_finite or s.nonfinite_fraction > 0), default=None)


def worker_lines(group: RunResult, script) -> list[str]:
    """One line per worker: steps, how it ended, where it was."""
    out = []
    for index, run in enumerate(group.workers):
        end = run.end or {}
        status = end.get("status") or f"died (exit status {run.returncode})"
        if status == "exit":
            status = f"exit {end.get('code')}"
        last = max((s.step for s in run.steps), default=None)
        line = f"worker {index}: {run.step_count} steps" + (f" (last step {last})" if last is not None else "")
        line += f", {status}"
        place = _place(run, script) if status in ("halted", "timeout") else ""
        if place:
            line += f", {place}"
        out.append(line)
    return out


def _names(where: list) -> str:
    seen = []
    for worker, replica in where:
        text = f"worker {worker} replica {replica}"
        if text not in seen:
            seen.append(text)
    return ", ".join(seen)


def explain(verdict, mixed: RunResult, baseline: RunResult | None, script):
    """The group verdict with its workers named (``verdict`` is changed and returned)."""
    if not mixed.workers:
        return verdict
    lines = worker_lines(mixed, script)
    if verdict.name == "non-finite":
        step = next(s for s in mixed.steps if s.step == verdict.evidence.get("step") and s.nonfinite_where)
        # Workers whose own loss was non-finite at that step come first; a worker with only non-finite gradients
        # there (its own scaled gradients overflowing while the scale warms up, or a peer's all-reduced) is named
        # apart: turn 17's sharded_spend named worker 0, whose loss was finite, beside worker 1.
        lossy = {w for w, run in enumerate(mixed.workers)
                 for s in run.steps if s.step == step.step and s.optimizer == step.optimizer and not s.loss_finite}
        first = [p for p in step.nonfinite_where if p[0] in lossy]
        rest = [p for p in step.nonfinite_where if p[0] not in lossy]
        if first and rest:
            verdict.summary += f" on {_names(first)} (non-finite gradients only on {_names(rest)})"
        else:
            verdict.summary += f" on {_names(step.nonfinite_where)}"
        verdict.evidence["where"] = step.nonfinite_where
    elif verdict.name == "crashed":
        worker = cause_worker(mixed)
        if worker is not None:
            verdict.summary = f"worker {worker}: {verdict.summary}"
            verdict.evidence["worker"] = worker
        hint = keras3_fit_hint(mixed)
        if hint:
            verdict.notes.append(hint)
    elif verdict.name == "timeout":
        last = _last_nonfinite(mixed)
        hang = (mixed.halted or "").startswith("hang")
        head = "the workers hang (a collective waits for a worker)" if hang else "the workers did not finish within the timeout"
        saw = f"; worker {last[0]} last saw a non-finite {last[2]} (step {last[1]})" if last else ""
        first = _first_nonfinite(mixed.workers[last[0]]) if last else None
        if first is not None and first < last[1]:
            # The hang is the effect (Keras 3's LossScaleOptimizer under MWMS: the worker with an overflow skips, its
            # peers wait in the all-reduce); where the overflow began is the cause (turn 17's sharded_spend: step 0).
            saw = saw[:-1] + f"; its first at step {first})"
        verdict.summary = f"{head}: " + "; ".join(lines) + saw
        verdict.evidence.update(kind="hang" if hang else "timeout", workers=lines, halted=mixed.halted)
        if last:
            verdict.evidence["last_nonfinite"] = {"worker": last[0], "step": last[1], "in": last[2]}
        return verdict
    verdict.notes.append(f"{len(mixed.workers)} workers: " + "; ".join(lines))
    if baseline is not None and baseline.workers and baseline.halted:
        verdict.notes.append(f"the float32 workers were halted ({baseline.halted})")
    return verdict


def keras3_fit_hint(group: RunResult) -> str | None:
    """Keras 3's ``fit`` fails under MultiWorkerMirroredStrategy before its first step: it
    hands a ``PerReplica`` batch to a conversion (keras-team/keras#20585, open since Keras
    3.0; TensorFlow's multi-worker Keras tutorial fails the same way). Not a float16 problem:
    say what trains instead."""
    crash = group.crash or {}
    frames = crash.get("frames") or []
    keras3 = f"{os.sep}keras{os.sep}src{os.sep}"
    if "PerReplica" not in (crash.get("message") or "") or not any(keras3 in f.get("file", "") for f in frames):
        return None
    return ("Keras 3's `fit` does not run under MultiWorkerMirroredStrategy (keras-team/keras#20585): "
            "train with tf_keras (`pip install tf_keras`, TF_USE_LEGACY_KERAS=1) or a custom training loop "
            "under `strategy.run`, then verify again")


def launcher_hint(launches: list[dict]) -> str | None:
    """What to say when the script started workers itself (processes with a TF_CONFIG)
    instead of training: verify measures the process it runs, so point at ``--workers``."""
    if not launches:
        return None
    first = launches[0]
    argv = first.get("argv") or []
    scripts = [i for i, a in enumerate(argv) if a.endswith(".py")]
    try:
        count = len(json.loads(first.get("tf_config") or "{}")["cluster"]["worker"])
    except (ValueError, KeyError, TypeError):
        count = len(launches)
    shown = " ".join(shlex.quote(a) for a in argv)
    if scripts:
        rest = argv[scripts[0] + 1 :]
        command = f"mpfix verify --workers {count} {shlex.quote(argv[scripts[0]])}"
        if rest:
            command += " -- " + " ".join(shlex.quote(a) for a in rest)
    else:
        command = f"mpfix verify --workers {count} WORKER_SCRIPT -- ARGS"
    return (
        f"the script is a launcher: it started {len(launches)} process(es) with TF_CONFIG (`{shown}`) and made no "
        "optimizer step itself; verify measures the process it runs, not the workers it starts. Run the "
        f"worker script under verify, which starts the workers with their TF_CONFIG itself: `{command}`"
    )
