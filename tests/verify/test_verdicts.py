"""Verdicts on real training scripts (real TensorFlow on CPU, a few seconds each)."""

from __future__ import annotations

import math
import os
import time

import pytest

from verify_helpers import verify_script
from mpfix.verify.verdict import EXIT_CODES, FLOAT16_MAX, judge

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mask_report():
    return verify_script("mask_nan.py", locate=True)


@pytest.fixture(scope="module")
def fit_report():
    return verify_script("healthy_fit.py")


def test_minus_1e9_mask_is_non_finite_at_step_0(mask_report):
    v = mask_report.verdict
    assert v.name == "non-finite"
    assert v.exit_code == EXIT_CODES["non-finite"] == 10
    assert v.evidence["step"] == 0
    assert "loss" in v.evidence["in"]
    assert math.isnan(mask_report.mixed.steps[0].loss)
    # float32 is fine on the same script: the bug is float16's -1e9 -> -inf.
    assert all(math.isfinite(x) for x in mask_report.baseline.finite_losses)
    assert len(mask_report.baseline.steps) == 12


def test_locate_names_the_mask_line(mask_report):
    loc = mask_report.location
    assert loc is not None and loc.frame is not None
    assert loc.frame["file"].endswith("mask_nan.py")
    assert loc.frame["line"] == 28
    assert "-1e9" in loc.frame["code"]
    assert loc.op == "Mul"
    # The static rule for float16-overflowing constants flags the same line.
    assert loc.rule == "MP201"
    # Escalation points at that layer, and not at a loss scale (the NaN is in the
    # forward pass, which no scale touches).
    assert any("mask_nan.py:28" in e and 'dtype="float32"' in e for e in mask_report.escalation)
    assert not any("loss_scale_factor" in e for e in mask_report.escalation)


@pytest.mark.keras2
def test_keras2_all_steps_skipped_is_stalled():
    report = verify_script("k2_softmax_stall.py", steps=20, env={"TF_USE_LEGACY_KERAS": "1"})
    v = report.verdict
    assert v.name == "stalled", v.summary
    assert report.exit_code == 11
    assert report.mixed.keras == [2]
    assert v.evidence["skipped"] == 20
    # Keras 2 halves from 32768 down to its floor of 1.0 and stays there.
    scales = [s.loss_scale for s in report.mixed.steps]
    assert scales[0] == 32768.0 and scales[-1] == 1.0 and scales[-3:] == [1.0, 1.0, 1.0]
    losses = report.mixed.finite_losses
    assert len(losses) == 20 and max(losses) == min(losses)
    # float32 trains: nothing skipped, the loss moves.
    assert not any(s.skipped for s in report.baseline.steps)
    assert max(report.baseline.finite_losses) != min(report.baseline.finite_losses)
    assert any("scale cannot fix" in e for e in report.escalation)


def test_keras3_loop_without_scaling_underflows():
    report = verify_script("k3_underflow.py")
    v = report.verdict
    assert v.name == "underflow", v.summary
    assert report.exit_code == 12
    assert v.evidence["zero_fraction"] > 0.9
    assert v.evidence["float32_zero_fraction"] < 0.1
    assert report.mixed.keras == [3]
    assert not any(s.dynamic for s in report.mixed.steps)


def test_healthy_fit_with_baseline(fit_report):
    v = fit_report.verdict
    assert v.name == "healthy", v.summary
    assert fit_report.exit_code == 0
    assert len(fit_report.mixed.steps) == 12 and len(fit_report.baseline.steps) == 12
    assert fit_report.mixed.end["entries"] == ["fit"]
    # The baseline really ran in float32 although the script sets mixed_float16, and the
    # loss scaler compile() would add is absent there.
    assert fit_report.mixed.end["policies"]["keras3"] == "mixed_float16"
    assert fit_report.baseline.end["policies"]["keras3"] == "float32"
    assert all(s.dynamic and s.loss_scale == 32768.0 for s in fit_report.mixed.steps)
    assert not any(s.dynamic for s in fit_report.baseline.steps)
    # Same seed, same data: the two runs start from the same loss (float16 rounding aside).
    assert fit_report.mixed.steps[0].loss == pytest.approx(fit_report.baseline.steps[0].loss, rel=1e-2)
    assert_headroom_measured_and_far(fit_report)
    # The float32 baseline has no float16 layer to measure.
    assert all(s.act_max is None for s in fit_report.baseline.steps)


def test_healthy_custom_loop_in_tf_function():
    report = verify_script("healthy_loop.py")
    assert report.verdict.name == "healthy", report.verdict.summary
    mixed, base = report.mixed, report.baseline
    assert len(mixed.steps) == 12
    assert mixed.end["entries"] == []  # no fit: the tape/optimizer hooks measured it
    # Losses are unscaled (the LSO multiplies by 32768 before the tape sees it).
    assert mixed.steps[0].loss == pytest.approx(base.steps[0].loss, rel=1e-2)
    assert mixed.finite_losses[-1] < mixed.finite_losses[0]
    # The baseline's LossScaleOptimizer is a pass-through at scale 1.
    assert {s.loss_scale for s in base.steps} == {1.0}
    assert_headroom_measured_and_far(report)


def test_forced_bfloat16_policy():
    report = verify_script("healthy_loop.py", policy="mixed_bfloat16", steps=4)
    assert report.mixed.end["policies"]["keras3"] == "mixed_bfloat16"
    assert report.baseline.end["policies"]["keras3"] == "float32"
    assert report.verdict.name == "healthy", report.verdict.summary


def test_script_exception_is_crashed_with_last_frame():
    report = verify_script("raises.py", baseline=False)
    v = report.verdict
    assert v.name == "crashed"
    assert report.exit_code == 14
    assert v.evidence["type"] == "ValueError"
    frame = v.evidence["frame"]
    assert frame["file"].endswith("raises.py") and frame["function"] == "load_batches"
    assert "reshape" in frame["code"]


def test_timeout_kills_the_process_group(tmp_path):
    pid_file = tmp_path / "helper.pid"
    started = time.monotonic()
    report = verify_script("sleeps.py", str(pid_file), baseline=False, timeout=15)
    assert time.monotonic() - started < 15 + 60  # the deadline ends it (no TensorFlow here), not a test timeout
    assert report.verdict.name == "timeout"
    assert report.exit_code == 15
    helper = int(pid_file.read_text())
    # The helper the script started is gone too (not re-parented and left running).
    deadline = time.monotonic() + 30  # a bound (the loop ends once it is gone): a loaded 2-core CI
    while time.monotonic() < deadline and _alive(helper):
        time.sleep(0.1)
    assert not _alive(helper)


def assert_headroom_measured_and_far(report) -> None:
    """Healthy scripts: float16 layer outputs were measured, and are far from 65504 (no
    at-risk verdict)."""
    measured = [s.act_max for s in report.mixed.steps if s.act_max is not None]
    assert measured, "no float16 layer output was measured"
    assert max(measured) < 0.01 * FLOAT16_MAX
    assert report.verdict.name != "at-risk"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_mirrored_strategy_on_two_logical_cpus():
    report = verify_script("mirrored.py", steps=8)
    assert report.verdict.name == "healthy", report.verdict.summary
    assert len(report.mixed.steps) == 8  # one record per step, not one per replica
    assert all(s.dynamic for s in report.mixed.steps)
    assert report.mixed.crash is None and report.baseline.crash is None
    assert_headroom_measured_and_far(report)


def test_no_steps():
    report = verify_script("no_steps.py", baseline=False)
    assert report.verdict.name == "no-steps"
    assert report.exit_code == 16
    assert "mpfix verify main.py -- train" in report.verdict.summary


def test_float16_output_head_diverges_from_float32():
    """Finite, nothing stalls, no underflow: the float16 output layer rounds every
    prediction near 3000 to an even number, so mixed's loss plateaus near 1/3 while
    float32 fits the targets. With the fix (a float32 head) the same script is healthy."""
    report = verify_script("f16_head_regression.py", steps=30)
    v = report.verdict
    assert v.name == "diverged", v.summary
    assert report.exit_code == 13
    assert all(math.isfinite(x) for x in report.mixed.finite_losses)
    assert len(report.mixed.finite_losses) == 30
    # The evidence: mixed ends near the rounding floor, float32 orders of magnitude below.
    assert 0.15 < v.evidence["final_loss"] < 0.6
    assert v.evidence["float32_final_loss"] < 1e-2
    assert v.evidence["relative_difference"] > 0.9
    # Both start from the same loss: it is the end that differs.
    assert report.mixed.steps[0].loss == pytest.approx(report.baseline.steps[0].loss, rel=0.2)
    assert any('dtype="float32" on the last layer' in e for e in report.escalation)
    assert not any("loss_scale_factor" in e for e in report.escalation)

    # The fix: its float32 baseline is this one (float32 forces the head to float32
    # anyway), so only its mixed run is needed.
    fixed = verify_script("f16_head_regression.py", "--float32-head", steps=30, baseline=False)
    verdict = judge(fixed.mixed, report.baseline, fixed.script)
    assert verdict.name == "healthy", verdict.summary


def test_gan_steps_are_rounds_of_optimizers():
    """Discriminator updated twice per generator update: a step ends when an optimizer
    applies a second time, so each discriminator update is a step and the generator's
    update joins every second one; each optimizer keeps its own loss."""
    report = verify_script("gan.py", "--critic", "2", steps=4, baseline=False)
    mixed = report.mixed
    assert report.verdict.name == "healthy", report.verdict.summary
    assert mixed.step_count == 4 and mixed.end["steps"] == 4
    assert [(s.step, s.optimizer) for s in mixed.steps] == [(0, 0), (1, 0), (1, 1), (2, 0), (3, 0), (3, 1)]
    assert mixed.end["reason"] == "steps"  # stopped right after step 3's generator update
    # Discriminator (two BCE terms, ~1.4-1.7) and generator (~0.6-0.7) never mixed up.
    assert all(s.loss > 1.0 for s in mixed.of(0)) and all(s.loss < 1.0 for s in mixed.of(1))
    assert "4 steps (2 optimizers, 6 updates)" in report.verdict.summary
    assert_headroom_measured_and_far(report)
