"""Turn 13's runtime truth for wave 8/9's held-out scripts:

* a script that crashes the same way in float32 (an API the installed Keras lacks) has no numerics to compare, so
  ``repair`` tries the static fixes of the files the run used, each proven by both runs of the fixed script (wave 8's
  notebook_port_k3: crashed -> healthy with MP303's fix);
* a float32 baseline made non-finite by the float16 data its own input pipeline casts is no proof that mixed
  precision is innocent (wave 9's tfdata_standardize_k2: ``var + 1e-8`` in a float16 map), and keeping that data
  float32 may change the float32 run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mpfix.verify.baseline_notes import nonfinite_baseline_notes
from mpfix.verify.changes import Change, ChangeKind
from mpfix.verify.records import RunResult, Step
from mpfix.verify.repair_checks import float32_repaired
from verify_helpers import repair_copy

SCRIPTS = Path(__file__).parent / "scripts" / "repair"
NAN = float("nan")


def _float32(losses, casts=()):
    return RunResult("float32", end={"event": "end", "status": "finished", "policies": {"global": "float32"}},
                     returncode=0, data_casts=list(casts),
                     steps=[Step(i, x, 1.0, False, False, 0.0, 0.0, 1.0) for i, x in enumerate(losses)])


CAST = {"file": "/w/train.py", "line": 15, "function": "standardize", "source": "float32"}


def test_a_baseline_broken_by_its_own_float16_pipeline_does_not_clear_mixed_precision():
    notes = nonfinite_baseline_notes(1, _float32([1.13, NAN], [CAST]))
    assert len(notes) == 1 and "its input pipeline makes float16 data itself" in notes[0], notes
    assert "train.py:15" in notes[0] and "not mixed precision" not in notes[0]
    # With no float16 data of its own, the same baseline does clear it.
    assert "the cause is not mixed precision" in nonfinite_baseline_notes(1, _float32([1.13, NAN]))[0]


def test_keeping_the_pipelines_data_float32_may_change_a_float32_run_it_broke():
    data = [Change(ChangeKind.DATA_CAST, Path("train.py"), "", "")]
    assert float32_repaired(_float32([1.13, 1.0, 0.9]), _float32([1.13, NAN], [CAST]), data)
    assert not float32_repaired(_float32([1.13, 1.0, 0.9]), _float32([1.13, NAN]), data)  # broken by itself
    assert not float32_repaired(_float32([1.13, NAN]), _float32([1.13, NAN], [CAST]), data)  # still broken


@pytest.mark.slow
def test_a_crash_in_both_runs_is_repaired_by_the_static_fix_both_runs_of_the_fixed_script_prove(tmp_path):
    run = repair_copy(tmp_path, SCRIPTS / "k3_removed_api.py", steps=8, timeout=900)
    result, before, after = run.result, run.before, run.after
    assert result.returncode == 0, result.stdout + result.stderr
    assert "k3_removed_api.py: crashed -> healthy (exit 0)" in result.stdout, result.stdout
    assert "optimizer.scale_loss(loss)" in after and "optimizer.get_scaled_loss(loss)" not in after and after != before
    data = run.report
    assert [c["kind"] for c in data["changes"]] == ["static fix"], data["changes"]
    assert "the float32 run crashed too" in data["changes"][0]["evidence"]
