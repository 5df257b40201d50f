"""``mpfix repair`` where scaled gradients reach an optimizer that does not unscale them: the run's
applied gradients (~32768x float32's) name the cause, and MP111's display-only fix is proven by running
it (one real repair on TensorFlow, CPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPAIR = Path(__file__).parent / "scripts" / "repair"


@pytest.mark.slow
def test_repair_steps_inner_optimizer_sums_through_the_loss_scale_optimizer(tmp_path):
    script = tmp_path / "inner_accumulate_k3.py"
    shutil.copy(REPAIR / script.name, script)
    before = script.read_text()
    report = tmp_path / "repair.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)
    result = subprocess.run([sys.executable, "-m", "mpfix", "repair", script.name, "--steps", "6", "--device", "cpu",
                             "--json", str(report)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "inner_accumulate_k3.py: non-finite -> healthy (exit 0)" in result.stdout
    # Steps through the wrapped optimizer used to be no steps at all; now they are the run's steps, and the
    # one change kept is the display-only "apply through the LossScaleOptimizer".
    assert script.read_text() == before.replace("optimizer.inner_optimizer.apply_gradients",
                                                "optimizer.apply_gradients")
    data = json.loads(report.read_text())
    assert [c["kind"] for c in data["changes"]] == ["loss scaling"]
    assert "does not unscale them" in json.dumps(data), data.get("notes")
