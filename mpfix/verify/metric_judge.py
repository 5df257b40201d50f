"""Parent side: a Keras metric that is NaN/Inf under mixed precision while float32's is finite (no TensorFlow).

The child (``_metric_hooks.py``) records the logs of ``fit``'s training batches. A metric is judged only beside a
usable float32 baseline that logged it and whose every value of it was finite: a metric that is NaN in float32 too
(no positive labels yet, a 0/0 by design) is not the float16 run's fault. As with the loss, what the loss scaler's
warm-up does is not held against the run: a value that turned non-finite at a step whose update the scaler skipped
is excused, and so are the values after it in the same epoch (Keras's metrics are running means until the epoch's
reset at batch 0), unless it was finite again in between. The first value left is the evidence.
"""

from __future__ import annotations

import linecache
import math

from mpfix.verify.records import RunResult

# verdict.py's name and evidence kind of the verdict.
KIND = "metric"


def _fmt(x) -> str:
    return str(x) if not math.isfinite(x) else f"{x:.4g}"


def series(run: RunResult) -> dict[str, list[dict]]:
    """name -> its records in order: {"step", "epoch", "batch", "value"}."""
    out: dict[str, list[dict]] = {}
    for record in run.metrics:
        for name, value in record["values"].items():
            if value is not None:
                out.setdefault(name, []).append(dict(record, value=value))
    return out


def first_unexcused(records: list[dict], skipped: set[int]) -> dict | None:
    """The first non-finite record that no skipped update explains (see the module doc): one taken after a skipped
    update since the metric's previous record (a custom loop may read its metric once per epoch), or carried on from
    such a record by a running mean that Keras did not reset (batch 0) and that was not finite again in between."""
    excused, previous = False, -1
    for record in records:
        if record.get("batch") == 0:
            excused = False  # Keras reset the metric: a NaN from before is gone
        if math.isfinite(record["value"]):
            excused = False
        elif any(previous < step <= record["step"] for step in skipped):
            excused = True
        elif not excused:
            return record
        previous = record["step"]
    return None


def nonfinite_metric(mixed: RunResult, baseline: RunResult | None) -> dict | None:
    """Evidence for the first metric (in the order the run logged them) that is non-finite under mixed precision
    beside a finite float32 series; ``baseline`` None: judged alone, ``float32`` fields None (a note only)."""
    ours = series(mixed)
    theirs = series(baseline) if baseline is not None else {}
    skipped = {s.step for s in mixed.steps if s.skipped}
    for name, records in ours.items():
        base = theirs.get(name)
        if baseline is not None and (not base or not all(math.isfinite(r["value"]) for r in base)):
            continue
        bad = first_unexcused(records, skipped)
        if bad is None:
            continue
        same = next((r for r in base or [] if r["step"] == bad["step"]), None)
        counted = [r for r in records if r["step"] >= bad["step"]]
        origin = mixed.metric_origins.get(name, {})
        return {
            "kind": KIND,
            "metric": name,
            "step": bad["step"],
            "epoch": bad.get("epoch"),
            "value": bad["value"],
            "last_value": records[-1]["value"],
            "nonfinite_batches": sum(not math.isfinite(r["value"]) for r in counted),
            "batches": len(counted),
            "float32_value": None if same is None else same["value"],
            "float32_last_value": base[-1]["value"] if base else None,
            "skipped_steps": sorted(skipped),
            "class": origin.get("class"),
            "source": origin.get("source"),
            "file": origin.get("file"),
            "line": origin.get("line"),
            "code": origin.get("code"),
        }
    return None


def describe(evidence: dict, script) -> str:
    """The verdict's summary: the metric, both runs' values, where the project wrote it."""
    from mpfix.verify.frames import describe as frame_place

    name, value = evidence["metric"], evidence["value"]
    text = (f"metric `{name}` is {_fmt(value)} from step {evidence['step']} on "
            f"({evidence['nonfinite_batches']} of the {evidence['batches']} batches from then on non-finite, last "
            f"{_fmt(evidence['last_value'])})")
    if evidence.get("float32_last_value") is not None:
        f32 = evidence.get("float32_value")
        at = f"{_fmt(f32)} at step {evidence['step']}, " if f32 is not None else ""
        text += f" while float32's is finite ({at}last {_fmt(evidence['float32_last_value'])})"
    text += " and the loss is finite"
    if evidence.get("file"):
        where = frame_place({"file": evidence["file"], "line": evidence["line"]}, script)
        text += f": a float16 value in {_method(evidence)} ({where}) overflows or loses precision; compute it in float32"
    elif evidence.get("source") == "metric":
        text += f" ({evidence.get('class')}, a library metric: its inputs are the model's float16 outputs)"
    return text


def _method(evidence: dict) -> str:
    return f"{evidence.get('class')}.{'update_state' if evidence.get('source') == 'metric' else 'train_step'}"


def findings(report) -> list:
    """The verdict's metric as a runtime finding (MP904) at the project's line that computes it, for the JSON and
    SARIF reports; [] when the verdict is not about a metric or the metric is a library's."""
    from mpfix.verify.evidence import Kind, RuntimeFinding

    evidence = report.verdict.evidence
    if evidence.get("kind") != KIND or not evidence.get("file") or not evidence.get("line"):
        return []
    source = linecache.getline(evidence["file"], int(evidence["line"])).rstrip("\n") or evidence.get("code") or ""
    column = len(source) - len(source.lstrip()) + 1
    f32 = evidence.get("float32_last_value")
    message = (f"metric `{evidence['metric']}` ({_method(evidence)}) is {_fmt(evidence['value'])} under mixed "
               f"precision from step {evidence['step']}" + (f", float32's {_fmt(f32)}" if f32 is not None else "")
               + ": compute it in float32")
    return [RuntimeFinding("MP904", message, evidence["file"], int(evidence["line"]), column, Kind.METRIC,
                           evidence["metric"], step=evidence["step"], end_column=len(source.rstrip()) + 1)]


def run_line(run: RunResult, limit: int = 4) -> str | None:
    """``metrics psnr -inf -> -inf, mae 0.2 -> 0.1`` (first and last logged value of each), for the text report."""
    parts = [f"{name} {_fmt(r[0]['value'])} -> {_fmt(r[-1]['value'])}" for name, r in list(series(run).items())[:limit]]
    return "metrics " + ", ".join(parts) if parts else None
