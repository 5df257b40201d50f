"""`mpfix apply --verify SCRIPT`: fix, then run the script before and after with real TensorFlow."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "k3_no_loss_scaling.py"


@pytest.mark.slow
def test_apply_verify_shows_both_verdicts(tmp_path: Path):
    script = tmp_path / "train.py"
    shutil.copy(SAMPLE, script)
    proc = subprocess.run(
        [sys.executable, "-m", "mpfix", "apply", "--unsafe-fixes", "--keras", "3", "--verify", str(script)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "Fixed 1 finding." in out
    assert "train.py: UNDERFLOW (exit 12)" in out  # the original, reported under the user's file name
    assert "train.py: HEALTHY (exit 0)" in out
    assert "verdict: underflow -> healthy" in out
    assert "scale_loss(" in script.read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".py")) == ["train.py"]
