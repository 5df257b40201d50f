"""End to end with real TensorFlow on CPU: float16 numerics bugs go non-finite, mpfix's fixes run finite.

Each script in ``fixtures/numerics/e2e`` reproduces one bug under ``mixed_float16`` and prints a
JSON line ``{"losses": [...]}``. For each script and Keras generation, the original must produce a
non-finite loss and the output of ``mpfix apply --unsafe-fixes`` must produce only finite ones.

The scripts do almost nothing but import TensorFlow (~8 s of CPU each; the training is milliseconds), so
each Keras generation runs all of its scripts, originals and fixes, in one fresh interpreter
(``_RUNNER``): each script as ``__main__`` with its own stdout, after the global policy is put back to
``float32`` and the Keras session cleared, so a script sees what a fresh process shows it (it sets
``mixed_float16`` itself). Two TensorFlow start-ups instead of sixteen; every script still runs for real.
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


# One interpreter per Keras generation: every script in argv runs as ``__main__`` in a fresh globals
# dict, after the global policy is reset and the session cleared; its stdout is its own. One JSON
# line per script: its last ``{...}`` line, or the traceback it raised.
_RUNNER = r"""
import contextlib, io, json, os, runpy, sys, traceback
import tensorflow as tf
if os.environ.get("TF_USE_LEGACY_KERAS"):
    import tf_keras as keras
else:
    import keras
for path in sys.argv[1:]:
    keras.mixed_precision.set_global_policy("float32")
    keras.backend.clear_session()
    out, error = io.StringIO(), None
    sys.argv = [path]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
    except BaseException:
        error = traceback.format_exc()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("{")]
    print("@@" + json.dumps({"path": path, "result": lines[-1] if lines else None, "error": error}), flush=True)
"""


def _run_all(scripts: list[Path], keras: int) -> dict[str, dict]:
    """path → {"result": its last JSON line or None, "error": a traceback or None}, one process."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("TF_USE_LEGACY_KERAS", None)
    if keras == 2:
        env["TF_USE_LEGACY_KERAS"] = "1"
    # 600 s for eight scripts (each had 240 s in a process of its own): on a loaded two-core machine one
    # TensorFlow import alone has taken over a minute.
    done = subprocess.run([sys.executable, "-c", _RUNNER, *map(str, scripts)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line[2:]) for line in done.stdout.splitlines() if line.startswith("@@")]
    assert [row["path"] for row in rows] == list(map(str, scripts)), done.stdout[-2000:]
    return {row["path"]: row for row in rows}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(script name, keras, "original"|"fixed") → losses; one process per Keras generation, both in parallel."""
    fixed_dir = tmp_path_factory.mktemp("fixed")
    for script in SCRIPTS:
        shutil.copy(script, fixed_dir / script.name)
    applied = subprocess.run(
        [sys.executable, "-m", "mpfix", "apply", "--unsafe-fixes", "--policy", "mixed_float16", "--select", "MP2",
         "--no-cache", str(fixed_dir)], capture_output=True, text=True, timeout=120)
    assert applied.returncode in (0, 1), applied.stderr
    for script in SCRIPTS:
        fixed = fixed_dir / script.name
        assert EXPECTED_FIX[script.name] in fixed.read_text(), fixed.read_text()
    paths = {(script.name, "original"): script for script in SCRIPTS}
    paths.update({(script.name, "fixed"): fixed_dir / script.name for script in SCRIPTS})
    with ThreadPoolExecutor(max_workers=len(GENERATIONS)) as pool:
        per_keras = dict(zip(GENERATIONS, pool.map(lambda keras: _run_all(list(paths.values()), keras), GENERATIONS)))
    return {(name, keras, kind): per_keras[keras][str(path)] for (name, kind), path in paths.items()
            for keras in GENERATIONS}


def _losses(row: dict) -> list[float]:
    assert row["error"] is None and row["result"], row["error"]
    return json.loads(row["result"])["losses"]


def _cases():
    for script in SCRIPTS:
        for keras in GENERATIONS:
            marks = [pytest.mark.slow] + ([pytest.mark.keras2] if keras == 2 else [])
            yield pytest.param(script.name, keras, marks=marks, id=f"{script.stem}-keras{keras}")


@pytest.mark.parametrize(("name", "keras"), list(_cases()))
def test_original_goes_nonfinite_and_fix_runs_finite(runs, name, keras):
    original = _losses(runs[(name, keras, "original")])
    fixed = _losses(runs[(name, keras, "fixed")])
    assert not all(math.isfinite(v) for v in original), original
    assert fixed and all(math.isfinite(v) for v in fixed), fixed
