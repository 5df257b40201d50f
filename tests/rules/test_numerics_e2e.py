"""End to end with real TensorFlow on CPU: float16 numerics bugs go non-finite, mpfix's fixes run finite.

Each script in ``fixtures/numerics/e2e`` reproduces one bug under ``mixed_float16`` and prints a
JSON line ``{"losses": [...]}``. For each script and Keras generation, the original must produce a
non-finite loss and the output of ``mpfix apply --unsafe-fixes`` must produce only finite ones.
All runs start together (a few seconds of TF import each) so the suite stays fast.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).parent / "fixtures" / "numerics" / "e2e").glob("*.py"))
GENERATIONS = (2, 3)
# What each script's fix must contain: proof that the right rule fixed it, not a side effect.
EXPECTED_FIX = {
    "mask_1e9.py": "* -3e4",
    "epsilon_1e8.py": "var + 1e-4",
    "l2_loss_activations.py": "tf.nn.l2_loss(tf.cast(h, tf.float32))",
    "regression_head.py": 'dtype="float32"',
}


def _run(script: Path, keras: int) -> list[float]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("TF_USE_LEGACY_KERAS", None)
    if keras == 2:
        env["TF_USE_LEGACY_KERAS"] = "1"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=240)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    return json.loads(lines[-1])["losses"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(script name, keras, "original"|"fixed") → losses, all computed in parallel."""
    fixed_dir = tmp_path_factory.mktemp("fixed")
    jobs = {}
    for script in SCRIPTS:
        fixed = fixed_dir / script.name
        shutil.copy(script, fixed)
        applied = subprocess.run(
            [sys.executable, "-m", "mpfix", "apply", "--unsafe-fixes", "--policy", "mixed_float16", "--select", "MP2",
             str(fixed)], capture_output=True, text=True, timeout=120)
        assert applied.returncode in (0, 1), applied.stderr
        assert EXPECTED_FIX[script.name] in fixed.read_text(), fixed.read_text()
        for keras in GENERATIONS:
            jobs[(script.name, keras, "original")] = (script, keras)
            jobs[(script.name, keras, "fixed")] = (fixed, keras)
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(_run, *args) for key, args in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


def _cases():
    for script in SCRIPTS:
        for keras in GENERATIONS:
            marks = [pytest.mark.slow] + ([pytest.mark.keras2] if keras == 2 else [])
            yield pytest.param(script.name, keras, marks=marks, id=f"{script.stem}-keras{keras}")


@pytest.mark.parametrize(("name", "keras"), list(_cases()))
def test_original_goes_nonfinite_and_fix_runs_finite(runs, name, keras):
    original = runs[(name, keras, "original")]
    fixed = runs[(name, keras, "fixed")]
    assert not all(math.isfinite(v) for v in original), original
    assert fixed and all(math.isfinite(v) for v in fixed), fixed
