"""``mpfix repair`` where scaled gradients reach an optimizer that does not unscale them: the run's
applied gradients (~32768x float32's) name the cause, and MP111's display-only fix is proven by running
it (one real repair on TensorFlow, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from verify_helpers import repair_copy

REPAIR = Path(__file__).parent / "scripts" / "repair"


@pytest.mark.slow
def test_repair_steps_inner_optimizer_sums_through_the_loss_scale_optimizer(tmp_path):
    run = repair_copy(tmp_path, REPAIR / "inner_accumulate_k3.py", steps=6, timeout=900)
    result, before, data = run.result, run.before, run.report
    assert result.returncode == 0, result.stdout + result.stderr
    assert "inner_accumulate_k3.py: non-finite -> healthy (exit 0)" in result.stdout
    # Steps through the wrapped optimizer used to be no steps at all; now they are the run's steps, and the
    # one change kept is the display-only "apply through the LossScaleOptimizer".
    assert run.after == before.replace("optimizer.inner_optimizer.apply_gradients",
                                                "optimizer.apply_gradients")
    assert [c["kind"] for c in data["changes"]] == ["loss scaling"]
    assert "does not unscale them" in json.dumps(data), data.get("notes")
