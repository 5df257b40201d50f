"""Verdicts that were wrong on real scripts (issue 14) and the float16 headroom verdict,
with real TensorFlow on CPU."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from verify_helpers import SCRIPTS, verify_script
from mpfix.verify.verdict import EXIT_CODES, FLOAT16_MAX, HEADROOM_FRACTION

pytestmark = pytest.mark.slow

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


@pytest.mark.keras2
def test_keras2_minimize_on_a_loss_scale_optimizer_records_the_unscaled_loss():
    report = verify_script("k2_minimize.py")
    mixed, base = report.mixed, report.baseline
    assert mixed.keras == [2]
    assert mixed.steps[0].loss_scale == 32768.0
    # The loss, not loss * 32768.
    assert mixed.steps[0].loss == pytest.approx(base.steps[0].loss, rel=1e-2)
    assert mixed.steps[0].loss < 100
    assert report.verdict.name == "healthy", report.verdict.summary


@pytest.mark.keras2
def test_tf_use_legacy_keras_set_by_the_script_is_honoured(monkeypatch):
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    report = verify_script("legacy_env.py")
    assert report.mixed.crash is None, report.verdict.summary
    assert report.mixed.keras == [2] and report.baseline.keras == [2]
    assert report.mixed.start["legacy_keras_env"] == "1"
    assert report.verdict.name == "healthy", report.verdict.summary


def test_pure_float16_policy_gets_a_float32_baseline():
    report = verify_script("pure_float16.py")
    v = report.verdict
    assert v.name == "non-finite" and v.evidence["step"] == 0
    assert report.mixed.end["policies"]["keras3"] == "float16"
    assert report.baseline.end["policies"]["keras3"] == "float32"
    assert all(math.isfinite(x) for x in report.baseline.finite_losses) and len(report.baseline.steps) == 12
    assert not any("not mixed precision" in n for n in v.notes), v.notes


def test_float32_failing_later_for_another_reason_is_not_the_same_cause():
    report = verify_script("late_nan.py")
    v = report.verdict
    assert v.name == "non-finite" and v.evidence["step"] == 0
    base = report.baseline
    assert [s.step for s in base.steps if s.loss is not None and not math.isfinite(s.loss)] == [8]
    assert not any("the cause is not mixed precision" in n for n in v.notes), v.notes
    assert any("only from step 8 (mixed: step 0)" in n for n in v.notes), v.notes


def test_loss_growing_in_float32_too_is_unstable_not_healthy():
    report = verify_script("both_diverge.py")
    v = report.verdict
    assert v.name == "unstable" and report.exit_code == EXIT_CODES["unstable"] == 18
    assert v.summary.startswith("float32 diverges too; not a precision problem")
    assert v.evidence["final_loss"] > 1000 * v.evidence["first_loss"]
    assert v.evidence["float32_final_loss"] > 1000 * v.evidence["float32_first_loss"]


def test_converged_flat_loss_without_baseline_is_not_stalled():
    report = verify_script("converged_flat.py", baseline=False)
    v = report.verdict
    assert v.name == "healthy", v.summary
    losses = report.mixed.finite_losses
    assert len(losses) == 12 and max(losses) - min(losses) <= 1e-6 * max(losses)
    assert any("cannot be told from a stalled one" in n for n in v.notes)


def test_warmup_skips_of_a_correct_fix_are_not_divergence():
    """SGD + clipping after unscaling: the scaler skips its warm-up steps, so mixed lags
    float32 by those updates at every step; after the same number of applied updates the
    losses agree. The skipped steps are in the evidence and the text."""
    report = verify_script("sgd_clip_warmup.py", steps=50)
    v = report.verdict
    assert v.name == "healthy", v.summary
    skipped = report.mixed.skipped_steps
    assert skipped[:3] == [0, 1, 2]
    assert v.evidence["skipped_steps"] == skipped
    assert any("lags float32" in n and "steps 0-" in n for n in v.notes), v.notes
    from mpfix.verify import report_text

    assert f"skipped {len(skipped)} (steps 0-" in report_text.render(report)


def test_dcgan_pattern_gives_each_optimizer_its_own_loss():
    """Both losses and both gradients first, then the generator's update, then the
    discriminator's: the generator's loss (one BCE, < 1) is not recorded as the
    discriminator's (two BCE terms, > 1)."""
    report = verify_script("dcgan.py", steps=6, baseline=False)
    mixed = report.mixed
    assert mixed.optimizers == [0, 1]
    generator, discriminator = mixed.of(0), mixed.of(1)
    assert len(generator) == len(discriminator) == 6
    assert all(s.loss < 1.0 for s in generator), [s.loss for s in generator]
    assert all(s.loss > 1.0 for s in discriminator), [s.loss for s in discriminator]


def test_float16_regression_head_is_at_risk_within_the_default_steps(tmp_path):
    """samples/float16_regression_head.py (targets ~1e5, float16 Dense(1) head) is finite
    for the 50 default steps (it goes inf later: test_samples runs 100 steps); its head's
    output passes the headroom threshold first: at-risk, with the layer, step, value,
    source line and the rule. With `mpfix apply --unsafe-fixes` (float32 head) it is
    healthy, as the README's samples table says (both with verify's defaults)."""
    import re
    import shutil
    import subprocess
    import sys

    from mpfix.verify.run import before_after

    sample = SAMPLES / "float16_regression_head.py"
    fixed = tmp_path / sample.name
    shutil.copy(sample, fixed)
    subprocess.run([sys.executable, "-m", "mpfix", "apply", "--unsafe-fixes", "--no-cache", str(fixed)], check=True,
                   capture_output=True)
    assert 'Dense(1, dtype="float32")' in fixed.read_text()
    pair = before_after(sample, fixed, device="cpu", jobs=2, timeout=240)  # default steps and baseline
    report = pair.before
    v = report.verdict
    assert report.options.steps == 50 and report.baseline is not None
    assert v.name == "at-risk" and report.exit_code == EXIT_CODES["at-risk"] == 17, v.summary
    assert all(math.isfinite(s.loss) for s in report.mixed.steps if s.loss is not None)
    assert report.mixed.step_count == 50
    e = v.evidence
    assert e["kind"] == "headroom"
    assert e["value"] >= HEADROOM_FRACTION * FLOAT16_MAX and e["step"] < 50
    assert e["file"].endswith("float16_regression_head.py") and e["line"] == 29
    assert e["rule"] == "MP205"
    assert "MP205" in v.summary and "float16_regression_head.py:29" in v.summary
    assert pair.after.verdict.name == "healthy", pair.after.verdict.summary
    readme = (SAMPLES.parent / "README.md").read_text(encoding="utf-8")
    row = re.search(r"^\| `float16_regression_head.py` \|.*\| (\S+) → (\S+)[^|]*\|$", readme, re.MULTILINE)
    assert row is not None and row.groups() == ("at-risk", "healthy")


def test_float16_loss_inputs_made_outside_layers_are_measured():
    report = verify_script("loss_input.py", steps=4, baseline=False)
    mixed = report.mixed
    losses = [i for i, layer in mixed.layers.items() if layer["class"] == "MeanSquaredError"]
    assert losses, mixed.layers
    peaks = [s.act_max for s in mixed.steps if s.act_layer in losses]
    assert peaks and 500 < max(peaks) < 2000  # |predictions| ~ 250 * 3


def test_targets_the_script_casts_to_float16_are_named_when_float32_fails_too():
    report = verify_script("half_targets.py")
    v = report.verdict
    assert v.name == "non-finite" and v.evidence["step"] == 0
    assert report.baseline.steps[0].act_max == math.inf  # the float32 run measured its float16 targets
    note = next(n for n in v.notes if "baseline is non-finite too" in n)
    # The map's casts are named (the child reads the map function's graph): line 23 casts both.
    assert "the script casts to float16 itself (its input pipeline casts at half_targets.py:23): `mae targets`" \
        in note, v.notes
    assert "the cause is not mixed precision" not in note


def test_broken_float32_data_is_still_not_a_mixed_precision_cause():
    report = verify_script("half_targets.py", "--targets", "inf")
    v = report.verdict
    assert v.name == "non-finite"
    assert any("the cause is not mixed precision" in n for n in v.notes), v.notes
