"""``mpfix repair --workers N``: a MultiWorkerMirroredStrategy script repaired as the group it runs as (turn 18).

``sharded_spend.py`` reads its TF_CONFIG and overflows on worker 1's shard only: run as one process it cannot even
start, so repair had nothing to work with. With ``--workers 2`` every run (the original, each trial, the float32
baselines) is a group of two real workers on 127.0.0.1, judged as one with the workers' per-op evidence merged,
as ``verify --workers`` judges it; the eager ``--locate`` re-run (one process) is not used.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from verify_helpers import repair_copy

WORKERS = Path(__file__).parent / "scripts" / "workers"


@pytest.mark.slow
@pytest.mark.keras2
def test_repair_runs_a_multi_worker_script_as_its_workers_and_fixes_the_head_its_one_shard_overflows(tmp_path):
    run = repair_copy(tmp_path, WORKERS / "sharded_spend.py", "--workers", "2", legacy=True)
    result, data, after = run.result, run.report, run.after
    assert result.returncode == 0 and "sharded_spend.py: non-finite -> healthy" in result.stdout, result.stdout
    assert "keras.layers.Dense(MONTHS, dtype=\"float32\")," in after, after
    # The Keras 3 branch of its loss-scaling switch is left as it is (tests/rules/test_generation_switch.py).
    assert "(optimizer.scale_loss(loss) if KERAS3 else optimizer.get_scaled_loss(loss))" in after, after
    # The runtime findings name the op lines worker 1's shard overflowed at, from the group's merged evidence.
    assert {(f["location"]["row"], f["code"]) for f in data["findings"]} >= {(50, "MP203")}, data["findings"]
