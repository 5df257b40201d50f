"""The float32 baseline drops a Keras 3 fixed loss scale (``loss_scale_factor``), so a script whose scaling is
half done (the factor on the optimizer, no ``scale_loss``: every update 1/1024) stalls beside float32 training
instead of agreeing with a baseline that made the same mistake (wave 8's lsf_noscale_k3). Real TF, CPU."""

from __future__ import annotations

import pytest

from mpfix.verify.verdict import UNSCALED_KIND

from verify_helpers import verify_script

pytestmark = pytest.mark.slow


def test_a_fixed_scale_without_scale_loss_is_stalled_beside_a_baseline_with_no_loss_scale():
    report = verify_script("k3_fixed_scale.py", steps=12)
    verdict = report.verdict
    assert verdict.name == "stalled" and verdict.evidence.get("kind") == UNSCALED_KIND, verdict.summary
    assert "1/1024" in verdict.summary
    assert {s.loss_scale for s in report.mixed.steps} == {1024.0}
    assert {s.loss_scale for s in report.baseline.steps} == {1.0}  # the factor is gone in float32
    # The advice is to scale the loss, not to add the fixed scale the script already has.
    assert any("optimizer.scale_loss(loss)" in e for e in report.escalation), report.escalation
    assert not any("loss_scale_factor=" in e for e in report.escalation), report.escalation


def test_a_fixed_scale_with_scale_loss_is_healthy():
    report = verify_script("k3_fixed_scale.py", "--scale-loss", steps=12)
    assert report.verdict.name == "healthy", report.verdict.summary
    assert {s.loss_scale for s in report.mixed.steps} == {1024.0}
