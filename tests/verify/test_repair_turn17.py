"""Turn 17's runtime held-out scripts (tests/verify/scripts/repair/: horizon_train_step, pipeline_energy,
running_total_rnn, contrastive_views, gram_texture_k3; tests/verify/scripts/workers/sharded_spend.py) and the
classes they showed in ``verify`` and ``repair``:

* ``keras.layers.RNN(cell)`` runs a cell the project built, a layer with its own dtype policy: ``dtype="float32"``
  on the RNN leaves the cell float16 (its loop still overflows; tf_keras raises on the float32 state beside a
  float16 cell). The child records a recurrent layer's project-built cell, and the layer change writes both
  (running_total_rnn: no change was kept);
* a ``tf.data`` map that casts to a dtype the source does not spell (``tf.cast(window, COMPUTE_DTYPE)``, the
  policy's compute dtype) made float16 where the child saw it: the cast to float32 is now written there too
  (pipeline_energy: "nothing to try");
* a trial judged again over 4x the steps (the loss scale still warming up) was compared with the 10-step float32
  baseline, whose losses pair with none of the updates applied after the warm-up: it is now compared with the
  original's float32 run over as many steps (gram_texture_k3's float32 GramDescriptor: "diverged", then healthy);
* a non-finite step whose first inf/NaN no op of the step made, beside a ``tf.data`` map that casts to float16:
  verify named no line (Keras 3) or only the iterator's next batch "from finite inputs" at ``fit``'s line
  (tf_keras); it now names the pipeline's cast, and the batch as brought into the step;
* ``verify --workers``: the group's run kept no per-op evidence (its ``ops`` were none of the workers'), so an
  overflow on worker 1 was never named at its line; the workers' evidence is now merged. And a worker whose loss
  was finite (its gradients only non-finite: a warm-up skip) was named beside the one whose loss was not.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mpfix.verify import data_casts
from mpfix.verify.candidates import _layer_change
from mpfix.verify.evidence import findings
from mpfix.verify.records import RunResult, Step
from mpfix.verify.verdict import judge
from mpfix.verify.workers_judge import explain, merge
from verify_helpers import repair_copy

SCRIPTS = Path(__file__).parent / "scripts" / "repair"
WORKERS = Path(__file__).parent / "scripts" / "workers"

CELL = '''from tensorflow import keras


class Total(keras.layers.Layer):
    pass


cell = Total(16)
inline = keras.layers.RNN(Total(4))
apart = keras.layers.RNN(cell)
'''


def _rnn(line: int, code: str, cell_line: int, cell_code: str, path: str = "/w/train.py") -> dict:
    return {"name": "rnn", "class": "RNN", "file": "/w/train.py", "line": line, "code": code,
            "cell": {"name": "total", "class": "Total", "file": path, "line": cell_line, "code": cell_code}}


def test_a_recurrent_layers_own_cell_is_made_float32_with_it():
    inline = _layer_change(_rnn(9, "inline = keras.layers.RNN(Total(4))", 9, "inline = keras.layers.RNN(Total(4))"),
                           "evidence")
    assert inline.description == 'dtype="float32" on layer `rnn` (RNN) and on its cell `total` (Total)'
    assert 'inline = keras.layers.RNN(Total(4, dtype="float32"), dtype="float32")\n' in inline.apply(CELL)
    apart = _layer_change(_rnn(10, "apart = keras.layers.RNN(cell)", 8, "cell = Total(16)"), "evidence").apply(CELL)
    assert 'cell = Total(16, dtype="float32")\n' in apart and 'RNN(cell, dtype="float32")\n' in apart, apart
    # A cell built in another file, or a layer without a cell: the layer alone.
    other = _layer_change(_rnn(10, "apart = keras.layers.RNN(cell)", 8, "cell = Total(16)", "/w/cells.py"), "e")
    assert other.apply(CELL).count('dtype="float32"') == 1 and "cell" not in other.extra
    # A cell line that is gone: the change no longer applies (never the RNN alone under the cell's name).
    assert _layer_change(_rnn(10, "apart = keras.layers.RNN(cell)", 8, "cell = Total(32)"), "e").apply(CELL) is None


PIPELINE = '''import tensorflow as tf

DTYPE = "float16"


def features(x, y, policy):
    x = tf.cast(x, DTYPE)
    both = tf.cast(x, policy.compute_dtype), tf.cast(y, tf.int32), tf.cast(y, "float64")
    return tf.cast(x, tf.float16), y
'''


def test_a_data_cast_to_a_dtype_the_source_does_not_spell_is_made_float32():
    assert data_casts.sites(PIPELINE, 7) == ["tf.cast(x, DTYPE)"]
    assert '    x = tf.cast(x, "float32")\n' in data_casts.to_float32(PIPELINE, 7, 0)
    # A literal dtype other than float16 is never a site; an expression is, where the run saw float16 made.
    assert data_casts.sites(PIPELINE, 8) == ["tf.cast(x, policy.compute_dtype)"]
    assert 'both = tf.cast(x, "float32"), tf.cast(y, tf.int32)' in data_casts.to_float32(PIPELINE, 8, 0)
    assert data_casts.to_float32(PIPELINE, 8, 1) is None
    assert '    return tf.cast(x, tf.float32), y\n' in data_casts.to_float32(PIPELINE, 9, 0)


def _worker(ops: list[dict], loss: float) -> RunResult:
    run = RunResult("mixed")
    run.steps = [Step(0, loss, 32768.0, True, True, 0.0, 0.0, 1.0)]
    run.end = {"status": "stopped"}
    run.ops = ops
    return run


def test_the_workers_per_op_evidence_is_the_groups(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import tensorflow as tf\nloss = tf.reduce_sum(tf.square(y - pred), axis=1)\n")
    square = {"type": "Square", "name": "Square", "file": str(script), "line": 2, "order": 0, "trace": 0}
    calm = dict(square, peak=40.0, peak_step=0, first_bad=-1, born=False)
    overflow = dict(square, peak=0.0, peak_step=-1, first_bad=0, born=True)
    group = merge("mixed", [_worker([calm], 10.0), _worker([overflow], float("inf"))], [0, 1])
    (found,) = findings(group)
    assert (found.line, found.op, found.step) == (2, "Square", 0), found
    assert found.message.startswith("float16 `Square` gave inf/NaN from finite inputs at step 0"), found.message


def test_a_worker_with_only_non_finite_gradients_is_named_apart_from_the_one_whose_loss_was(tmp_path):
    # sharded_spend under tf_keras at step 0: worker 1's loss inf; worker 0's loss 373, its scaled gradients
    # overflowing at the scale of 32768 (a warm-up skip).
    lossy, calm = _worker([], float("inf")), _worker([], 373.0)
    lossy.steps[0].nonfinite_fraction = calm.steps[0].nonfinite_fraction = 1.0
    group = merge("mixed", [calm, lossy], [0, 1])
    verdict = explain(judge(group, None, tmp_path / "train.py"), group, None, tmp_path / "train.py")
    assert verdict.name == "non-finite", verdict.summary
    assert verdict.summary.endswith("on worker 1 replica 0 (non-finite gradients only on worker 0 replica 0)"), \
        verdict.summary
    assert verdict.evidence["where"] == [[0, 0], [1, 0]]


def test_a_hang_names_where_the_workers_overflow_began(tmp_path):
    # sharded_spend under Keras 3: worker 1's loss inf from step 0, its updates skipped, worker 0's applied from
    # step 3: the all-reduce waits forever. The summary said only "last saw ... (step 3)".
    halted = {"status": "halted", "in_tensorflow": True}
    calm, lossy = _worker([], 373.0), _worker([], float("inf"))
    calm.steps = [Step(k, 373.0, 32768.0, True, k < 3, 0.0, 0.0, 1.0) for k in range(4)]
    lossy.steps = [Step(k, float("inf"), 32768.0, True, True, 1.0, 0.0, 1.0) for k in range(4)]
    calm.end, lossy.end = dict(halted), dict(halted)
    group = merge("mixed", [calm, lossy], [0, 1])
    group.halted, group.timed_out = "hang: no worker recorded a step for 30 s", True
    verdict = explain(judge(group, None, tmp_path / "train.py"), group, None, tmp_path / "train.py")
    assert verdict.name == "timeout", verdict.summary
    assert verdict.summary.endswith("; worker 1 last saw a non-finite loss (step 3; its first at step 0)"), \
        verdict.summary
    # One non-finite step: as before.
    lossy.steps = [Step(k, 1.0 if k < 3 else float("inf"), 32768.0, True, k == 3, 1.0 if k == 3 else 0.0, 0.0, 1.0)
                   for k in range(4)]
    group = merge("mixed", [calm, lossy], [0, 1])
    group.halted, group.timed_out = "hang: no worker recorded a step for 30 s", True
    assert explain(judge(group, None, tmp_path / "t.py"), group, None, tmp_path / "t.py").summary.endswith(
        "; worker 1 last saw a non-finite loss (step 3)")


def _pipeline_run(script: Path, ops: list[dict]) -> RunResult:
    run = _worker(ops, float("nan"))
    run.data_casts = [{"file": str(script), "line": 4, "function": "features", "nth": 0, "source": "float32",
                       "code": "window = tf.cast(window, DTYPE)"}]
    return run


def test_a_pipeline_cast_is_named_when_no_op_of_the_step_made_the_nan(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import tensorflow as tf\n\ndef features(window):\n    window = tf.cast(window, DTYPE)\n"
                      "model.fit(dataset)\n")
    batch = {"type": "IteratorGetNext", "name": "IteratorGetNext", "file": str(script), "line": 5, "order": 0,
             "trace": 0, "peak": 0.0, "peak_step": -1, "first_bad": 0, "born": True, "enters": True}
    # Keras 3 measured no op of the step that went non-finite; tf_keras its iterator's next batch, at fit's line.
    for ops in ([], [batch]):
        found = findings(_pipeline_run(script, ops))
        assert (found[0].line, found[0].op, found[0].extra) == (4, "Cast", {"data_cast": True}), found
        assert found[0].message.startswith("the input pipeline casts float32 data to float16 here (`features`) and "
                                           "no float16 op of the step made its first inf/NaN (step 0)"), found[0]
    (_, entered) = findings(_pipeline_run(script, [batch]))
    assert entered.message == "float16 `IteratorGetNext` brought inf/NaN into the step at step 0", entered.message
    # An op of the step that made the NaN from finite inputs is the finding; the cast is then no lead.
    square = dict(batch, type="Square", name="Square", line=5, enters=False)
    assert [f.op for f in findings(_pipeline_run(script, [square]))] == ["Square"]


def _repair(tmp_path: Path, name: str, legacy: bool = False) -> tuple[subprocess.CompletedProcess, dict, str]:
    run = repair_copy(tmp_path, SCRIPTS / name, legacy=legacy)
    return run.result, run.report, run.after


@pytest.mark.slow
def test_repair_makes_an_rnn_and_its_accumulating_cell_float32(tmp_path):
    # The RNN alone in float32 leaves the cell's loop float16 (non-finite, as before); the cell alone is stalled
    # here and crashes tf_keras (a float16 input beside its float32 state). Both: healthy after the loss scale's
    # warm-up. (tf_keras's run needs the float16 Dense after it in float32 too: its kernel gradient passes 65504
    # at the scale's floor of 1; tests/verify/test_repair_turn18.py repairs it in two rounds.)
    result, data, after = _repair(tmp_path, "running_total_rnn.py")
    assert result.returncode == 0 and "running_total_rnn.py: non-finite -> healthy" in result.stdout, result.stdout
    assert [(c["kind"], c["line"]) for c in data["changes"]] == [("float32 layer", 41)], data["changes"]
    assert 'keras.layers.RNN(RunningTotalCell(16, HOURS, dtype="float32"), dtype="float32"),' in after, after


@pytest.mark.slow
def test_repair_keeps_a_pipeline_cast_to_the_compute_dtype_float32(tmp_path):
    result, data, after = _repair(tmp_path, "pipeline_energy.py")
    assert result.returncode == 0 and "pipeline_energy.py: non-finite -> healthy" in result.stdout, result.stdout
    assert [(c["kind"], c["line"]) for c in data["changes"]] == [("float32 data", 21)], data["changes"]
    assert '    window = tf.cast(window, "float32")\n' in after, after


@pytest.mark.slow
def test_repair_judges_a_warm_up_beside_float32_over_as_many_steps(tmp_path):
    result, data, after = _repair(tmp_path, "gram_texture_k3.py")
    assert result.returncode == 0 and "gram_texture_k3.py: non-finite -> healthy" in result.stdout, result.stdout
    assert [(c["kind"], c["line"]) for c in data["changes"]] == [("float32 layer", 35)], data["changes"]
    (layer,) = [t for t in data["trials"] if t["kept"] and t["kind"] == "float32 layer"]
    assert "still warming up" in layer["reason"], data["trials"]
    # The island at the Einsum, kept first as progress (the NaN moved to its cast back), is needless once the
    # layer is float32: dropped when judged over the warm-up too.
    assert 'GramDescriptor(dtype="float32"),' in after and "ops.cast(features" not in after, after
    # The final loss is shown beside the float32 run it was judged with: as many steps (the script's 18).
    assert data["runs"]["float32"]["steps"] == data["runs"]["mixed_after"]["steps"] == 18, data["runs"]
