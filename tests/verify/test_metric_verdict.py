"""A Keras metric NaN/Inf under mixed precision while float32's is finite is ``non-finite-metric`` (exit 19), turn 20.

Held-out wave 15's psnr_metric_k2 logged ``psnr = -inf`` on every epoch under float16 (a Metric subclass averaging
squared 0-255 errors in float16) and verify called it healthy: it judged the loss only. Now ``fit``'s batch logs are
recorded in both runs (``_metric_hooks.py``) and judged beside float32's (``metric_judge.py``), with the line of the
project's ``update_state`` or ``train_step``. Not the float16 run's fault, and so not judged: a metric non-finite in
float32 too, and a value non-finite only at an update the loss scaler skipped in its warm-up (like the loss's
skipped steps), with the running mean that carries it to the epoch's reset.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mpfix.verify import metric_judge
from mpfix.verify.records import RunResult, Step, parse_run
from mpfix.verify.verdict import EXIT_CODES, judge
from verify_helpers import verify_script

SCRIPT = Path("/p/train.py")
INF = math.inf


def _run(mode: str, values: list[float], skipped=(), name: str = "psnr", batches: int = 100) -> RunResult:
    run = RunResult(mode, end={"status": "ok", "policies": {"global": "float32" if mode == "float32" else "mixed"}})
    run.steps = [Step(k, 1.0 - 0.01 * k, 1.0, mode != "float32", k in skipped, float(k in skipped), 0.0, 1.0)
                 for k in range(len(values))]
    run.metrics = [{"step": k, "epoch": k // batches, "batch": k % batches, "values": {name: v}}
                   for k, v in enumerate(values)]
    return run


def test_nonfinite_metric_beside_finite_float32_is_its_own_verdict():
    mixed, base = _run("mixed", [-INF] * 6), _run("float32", [13.0 + 0.1 * k for k in range(6)])
    mixed.metric_origins["psnr"] = {"class": "PSNR", "source": "metric", "file": "/p/train.py", "line": 22}
    v = judge(mixed, base, SCRIPT)
    assert v.name == "non-finite-metric" and v.exit_code == EXIT_CODES["non-finite-metric"] == 19
    assert v.evidence["metric"] == "psnr" and v.evidence["value"] == -INF and v.evidence["step"] == 0
    assert v.evidence["float32_value"] == 13.0 and v.evidence["float32_last_value"] == pytest.approx(13.5)
    assert v.evidence["line"] == 22 and "PSNR.update_state (train.py:22)" in v.summary
    assert "-inf" in v.summary and "13.5" in v.summary


def test_only_a_metric_float32_logged_finite_is_judged():
    mixed = _run("mixed", [math.nan] * 6)
    assert judge(mixed, _run("float32", [1.0] * 6), SCRIPT).name == "non-finite-metric"
    # NaN in float32 too (once is enough: a 0/0 by design), or never logged by float32: not the float16 run's fault.
    assert judge(mixed, _run("float32", [1.0, math.nan, 1.0, 1.0, 1.0, 1.0]), SCRIPT).name == "healthy"
    assert judge(mixed, _run("float32", [1.0] * 6, name="other"), SCRIPT).name == "healthy"


def test_warm_up_skips_excuse_the_value_and_its_running_mean_until_the_reset():
    # Steps 0-2 skipped (non-finite gradients): the logged value is inf there and, as a running mean, stays inf
    # until the epoch's reset at step 4 (batch 0); from then on it is finite.
    values = [INF, INF, INF, INF, 5.0, 5.0]
    mixed, base = _run("mixed", values, skipped={0, 1, 2}, batches=4), _run("float32", [5.0] * 6, batches=4)
    assert judge(mixed, base, SCRIPT).name == "healthy"
    # The same values with no skipped update are the metric's own failure ...
    assert judge(_run("mixed", values, batches=4), base, SCRIPT).name == "non-finite-metric"
    # ... and a metric non-finite again after the reset is judged at that step.
    again = _run("mixed", values[:4] + [INF, INF], skipped={0, 1, 2}, batches=4)
    v = judge(again, base, SCRIPT)
    assert v.name == "non-finite-metric" and v.evidence["step"] == 4


def test_a_metric_read_once_per_epoch_is_excused_by_any_skip_since_its_last_read():
    # A custom loop reading result() at the end of each 4-step epoch (batch unknown): warm-up skips at steps 0-1.
    mixed, base = _run("mixed", [0.0] * 8, skipped={0, 1}), _run("float32", [0.0] * 8)
    for run, values in ((mixed, [INF, INF]), (base, [5.0, 5.0])):
        run.metrics = [{"step": step, "epoch": None, "batch": None, "values": {"psnr": v}}
                       for step, v in zip((3, 7), values)]
    assert judge(mixed, base, SCRIPT).name == "healthy"
    for step in mixed.steps[:2]:
        step.skipped, step.nonfinite_fraction = False, 0.0
    v = judge(mixed, base, SCRIPT)
    assert v.name == "non-finite-metric" and v.evidence["step"] == 3


def test_without_a_baseline_or_beside_another_verdict_it_is_a_note():
    mixed = _run("mixed", [INF] * 6)
    v = judge(mixed, None, SCRIPT, baseline_expected=False)
    assert v.name == "healthy" and any("no float32 baseline" in n and "`psnr`" in n for n in v.notes)
    # A stall stays the verdict (it says more about training); the metric is a note beside it.
    stalled = _run("mixed", [INF] * 6)
    stalled.steps[-1].loss_scale = 2.0**-12  # a dynamic scale collapsed towards 0
    v = judge(stalled, _run("float32", [5.0] * 6), SCRIPT)
    assert v.name == "stalled" and any("`psnr`" in n for n in v.notes)


def test_records_decode_metric_events_and_report_them():
    run = parse_run("mixed", [
        {"event": "metric-origin", "name": "psnr", "class": "PSNR", "source": "metric", "file": "/p/t.py", "line": 9},
        {"event": "metrics", "step": 0, "epoch": 0, "batch": 0, "values": {"psnr": "-inf", "mae": 0.5}},
    ])
    assert run.metrics[0]["values"] == {"psnr": -INF, "mae": 0.5}
    assert run.metric_origins["psnr"]["line"] == 9
    data = json.loads(json.dumps(run.to_json()))
    assert data["metrics"][0]["values"]["psnr"] == "-inf" and data["metric_origins"]["psnr"]["class"] == "PSNR"
    assert metric_judge.run_line(run) == "metrics psnr -inf -> -inf, mae 0.5 -> 0.5"


# --- real TensorFlow (CPU, one child at a time) ---

def _verify(name: str, **options):
    options.setdefault("steps", 8)
    return verify_script(name, jobs=1, **options)


@pytest.mark.slow
@pytest.mark.keras2
def test_tf_keras_metric_subclass_overflowing_in_float16(tmp_path):
    report = _verify("metric_signal_db_k2.py")
    v = report.verdict
    assert v.name == "non-finite-metric", v.summary
    assert report.mixed.keras == [2]
    assert v.evidence["metric"] == "signal_db" and v.evidence["value"] == INF and v.evidence["step"] == 0
    assert math.isfinite(v.evidence["float32_last_value"]) and v.evidence["float32_last_value"] > 30
    assert v.evidence["class"] == "SignalDb" and v.evidence["line"] == 18
    assert "SignalDb.update_state (metric_signal_db_k2.py:18)" in v.summary
    # The reports: the finding in JSON (and SARIF: the same list), every run's metrics.
    from mpfix.verify import report_json, report_sarif

    data = report_json.report_dict(report)
    assert data["verdict"]["exit_code"] == 19
    assert any(f["code"] == "MP904" and f["location"]["row"] == 18 for f in data["findings"])
    assert data["runs"]["float32"]["metrics"] and "signal_db" in data["runs"]["mixed"]["metric_origins"]
    sarif = json.loads(report_sarif.render(metric_judge.findings(report)))
    assert sarif["runs"][0]["results"][0]["ruleId"] == "MP904"


@pytest.mark.slow
def test_keras3_train_step_logs_overflowing_in_float16():
    report = _verify("metric_train_step_k3.py")
    v = report.verdict
    assert v.name == "non-finite-metric", v.summary
    assert report.mixed.keras == [3]
    assert v.evidence["metric"] == "peak_energy" and v.evidence["source"] == "train_step"
    assert v.evidence["line"] == 10 and "Denoiser.train_step" in v.summary
    assert math.isfinite(v.evidence["float32_last_value"])


@pytest.mark.slow
def test_keras3_warm_up_skips_leave_a_correct_script_healthy():
    report = _verify("metric_warmup_k3.py")
    assert report.verdict.name == "healthy", report.verdict.summary
    skipped = set(report.mixed.skipped_steps)
    norms = {m["step"]: m["values"]["grad_norm"] for m in report.mixed.metrics}
    # The fixture does what it is for: inf at the skipped warm-up steps, finite once the scaler applies updates.
    assert skipped and all(not math.isfinite(norms[s]) for s in skipped if s in norms)
    assert all(math.isfinite(v) for s, v in norms.items() if s not in skipped)


@pytest.mark.slow
@pytest.mark.parametrize("env", [{}, {"TF_USE_LEGACY_KERAS": "1"}], ids=["keras3", "tf_keras"])
def test_custom_loop_reads_its_metric_subclass_result(env):
    report = _verify("metric_custom_loop.py", env=env)
    v = report.verdict
    assert v.name == "non-finite-metric", v.summary
    assert report.mixed.keras == [2 if env else 3]
    assert v.evidence["metric"] == "energy" and v.evidence["line"] == 17 and v.evidence["value"] == INF
    # One value per step, read by the script's own print after each step, in both runs.
    assert [m["step"] for m in report.baseline.metrics] == list(range(7))


@pytest.mark.slow
@pytest.mark.keras2
def test_wrapped_result_still_converts_with_autograph_in_fit():
    report = _verify("metric_result_branch.py", env={"TF_USE_LEGACY_KERAS": "1"}, steps=6)
    assert report.verdict.name == "healthy", report.verdict.summary
    assert {"frac"} == {name for m in report.mixed.metrics for name in m["values"]}
