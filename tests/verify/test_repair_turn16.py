"""Turn 16's runtime held-out scripts (tests/verify/scripts/repair/: leaky_scan, activity_l1, pool_temperature,
pair_interactions, power_iteration; float16 failures no static rule sees at their line) and the classes they
showed in ``repair``:

* a ``tf.while_loop``'s loop variables follow its int32 counter: the per-op evidence measured only an op's first
  output, so a vector grown past 65504 in the loop's body was no finding (power_iteration); now an op's first
  float16 output is measured (``While`` at the loop's line, inside the layer whose ``call`` built it);
* an op inside a control-flow body nested in a project layer's method has no per-op evidence of its own, and
  ``--locate``'s eager re-run names only its line: the layer whose class holds that line is its owner, so
  ``dtype="float32"`` on that layer is a candidate (power_iteration: nothing was);
* a quotient that overflowed (``scores / temperature``, a temperature of 0.002 from a config file) is cast back
  inf by an island that stops at the division: the candidates now first offer the island grown like an
  overflowing op's, cast back after the softmax (pool_temperature: one change instead of an island plus the layer
  in float32, 4 runs instead of 8);
* Keras 3 sums the compiled float32 loss and every layer loss in one list: a float16 activity-regulariser
  penalty crashes ``fit`` with a TypeError naming only the tensor (activity_l1: "nothing to repair"); repair now
  reads that crash (``layer_losses``) and tries, per layer built with an ``activity_regularizer``, the
  regulariser function computed and returned in float32, then the layer in float32;
* a change that makes the forward pass finite can leave the dynamic loss scale still falling from 32768 when the
  run ends (every step skipped: ``stalled``); that trial is judged again over 4x the steps, and proves the
  change only if enough updates were applied there to compare with float32.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpfix.verify import layer_losses
from mpfix.verify.candidates import at_finding, for_crash
from mpfix.verify.evidence import Kind, RuntimeFinding
from mpfix.verify.islands import float32_island
from mpfix.verify.records import RunResult, Step
from mpfix.verify.repair_checks import enough_updates, warming_up
from mpfix.verify.repair_locate import enclosing_class, located
from mpfix.verify.verdict import Verdict
from verify_helpers import repair_copy, tf_env

SCRIPTS = Path(__file__).parent / "scripts" / "repair"

LOOP_LAYER = '''import tensorflow as tf


class Spectral(tf.keras.layers.Layer):
    def call(self, x):
        def body(i, v):
            return i + 1, tf.matmul(x, v)

        return tf.while_loop(lambda i, v: i < 3, body, (0, x))[1]


layer = Spectral()
'''


def _located(tmp_path: Path, layers: dict) -> list:
    script = tmp_path / "train.py"
    script.write_text(LOOP_LAYER)
    run = RunResult("mixed")
    run.numerics = {"message": 'Detected Infinity or NaN in output 0 of eagerly-executing op "MatMul"',
                    "frames": [{"file": str(script), "line": 7, "function": "body", "code": ""}]}
    return located(run, script, lambda path: Path(path).read_text(), layers)


def test_a_located_op_in_a_loop_body_of_a_layers_call_is_that_layers(tmp_path):
    spectral = {"name": "spectral", "class": "Spectral", "file": str(tmp_path / "train.py"), "line": 12,
                "code": "layer = Spectral()"}
    other = {"name": "dense", "class": "Dense", "file": str(tmp_path / "train.py"), "line": 3, "code": ""}
    (finding,) = _located(tmp_path, {0: other, 1: spectral})
    assert (finding.op, finding.line, finding.column) == ("MatMul", 7, 27)
    assert finding.owner == spectral, finding.owner
    # No layer of that class in the run: no owner (nothing to edit), the island at the op stays the candidate.
    (alone,) = _located(tmp_path, {0: other})
    assert alone.owner is None


def test_the_class_holding_a_line_is_the_innermost():
    text = "class A:\n    class B:\n        def f(self):\n            return 1\n    x = 2\n\ny = 3\n"
    assert [enclosing_class(text, line) for line in (4, 5, 7)] == ["B", "A", None]
    assert enclosing_class("def (:\n", 1) is None


POOL = '''import tensorflow as tf


class Pool(tf.keras.layers.Layer):
    def call(self, x):
        weights = tf.nn.softmax(self.score(x) / self.temperature, axis=1)
        return tf.reduce_sum(weights * x, axis=1)
'''


def test_an_overflowing_quotient_gets_an_island_grown_to_the_softmax():
    grown = float32_island(POOL, 6, 33, "RealDiv", grow=True)
    assert "weights = tf.cast(tf.nn.softmax(tf.cast(self.score(x), tf.float32) / tf.cast(self.temperature, " \
           "tf.float32), axis=1), self.compute_dtype)" in grown, grown
    # Not grown, the quotient is cast back before the softmax (inf again when it overflowed).
    plain = float32_island(POOL, 6, 33, "RealDiv")
    assert "tf.nn.softmax(tf.cast(tf.cast(self.score(x), tf.float32) / " in plain, plain
    finding = RuntimeFinding("MP901", "float16 `RealDiv` gave inf/NaN from finite inputs at step 0", "/w/train.py", 6,
                             33, Kind.NONFINITE, "RealDiv", step=0)
    offered = [(c.kind.value, bool(c.extra.get("grow"))) for c in at_finding(finding, Path("/w/train.py"), POOL,
                                                                              "mixed_float16")]
    assert offered == [("float32 island", True), ("float32 island", False)], offered
    # A quotient past the headroom threshold, not non-finite, keeps the plain island only.
    near = RuntimeFinding(**{**finding.__dict__, "kind": Kind.HEADROOM})
    assert [bool(c.extra.get("grow")) for c in at_finding(near, Path("/w/train.py"), POOL, "mixed_float16")] == [False]


LAYER_LOSS = ("TypeError: Cannot convert a list containing a tensor of dtype <dtype: 'float16'> to <dtype: 'float32'> "
              "(Tensor is: <tf.Tensor 'Sum:0' shape=() dtype=float16>)")
PENALTY = '''import tensorflow as tf
from tensorflow import keras


def sparsity(activations):
    return 1e-6 * tf.reduce_sum(tf.abs(activations))


def two(x):
    if x is None:
        return 0.0
    return x


hidden = keras.layers.Dense(64, activation="relu", activity_regularizer=sparsity)
other = keras.layers.Dense(8, activity_regularizer=two)
plain = keras.layers.Dense(8, activity_regularizer=keras.regularizers.L1(1e-4))
'''


def test_a_float16_layer_loss_crash_is_read_and_its_regularised_layers_found():
    assert layer_losses.read(LAYER_LOSS) == "Sum"
    assert layer_losses.read("Cannot convert a list containing a tensor of dtype <dtype: 'float32'> to <dtype: "
                             "'int32'> (Tensor is: <tf.Tensor 'Sum:0' shape=() dtype=float32>)") is None
    found = [(r.line, r.class_name, r.returns, r.function) for r in layer_losses.regularised(PENALTY)]
    # `two` has two returns and `L1(...)` is no function of the file: only the layers are offered there.
    assert found == [(15, "Dense", 6, "sparsity"), (16, "Dense", None, None), (17, "Dense", None, None)], found
    fixed = layer_losses.float32_return(PENALTY, 6)
    assert "    return 1e-6 * tf.reduce_sum(tf.abs(tf.cast(activations, tf.float32)))\n" in fixed, fixed


def test_a_layer_loss_crash_offers_the_regulariser_in_float32_then_the_layer(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PENALTY)
    crashed = Verdict("crashed", LAYER_LOSS, {"message": LAYER_LOSS, "frame": {"file": str(script), "line": 17}})
    offered = for_crash(crashed, lambda path: Path(path).read_text(), lambda path: path, [script])
    assert [(c.kind.value, c.line) for c in offered] == [("float32 island", 6), ("float32 layer", 15),
                                                         ("float32 layer", 16), ("float32 layer", 17)], offered
    assert "return 1e-6 * tf.reduce_sum(tf.abs(tf.cast(activations, tf.float32)))" in offered[0].apply(PENALTY)
    assert 'activity_regularizer=sparsity, dtype="float32")' in offered[1].apply(PENALTY)
    # Without the files the run used, nothing (the crash's line is `fit`'s).
    assert for_crash(crashed, lambda path: Path(path).read_text(), lambda path: path) == []


def _steps(skipped: list[bool], scales: list[float], loss: float = 1.0) -> RunResult:
    run = RunResult("mixed")
    run.steps = [Step(k, loss, scale, True, skip, 0.0, 0.0, 1.0) for k, (skip, scale) in enumerate(zip(skipped,
                                                                                                     scales))]
    return run


def test_a_scale_still_falling_from_its_start_is_a_warm_up_not_a_stall():
    halving = [32768.0 / 2 ** k for k in range(10)]
    assert warming_up(_steps([True] * 10, halving))
    assert warming_up(_steps([True] * 6 + [False] * 4, halving[:6] + [halving[5]] * 4))
    # A skip after an applied update, a scale that stopped falling, a short prefix, a non-finite loss: no warm-up.
    assert not warming_up(_steps([True] * 6 + [False, True, False, False], halving))
    assert not warming_up(_steps([True] * 10, [1.0] * 10))
    assert not warming_up(_steps([True] * 3 + [False] * 7, halving[:3] + [halving[2]] * 7))
    assert not warming_up(_steps([True] * 10, halving, loss=float("nan")))
    # Over 40 steps, a change proves itself with at least half the steps asked for applied.
    assert enough_updates(_steps([True] * 11 + [False] * 9, halving + [1.0] * 10), 10)
    assert not enough_updates(_steps([True] * 11 + [False], halving + [1.0, 1.0]), 10)


@pytest.mark.slow
def test_verify_measures_the_loop_variables_a_while_loop_returns(tmp_path):
    shutil.copy(SCRIPTS / "power_iteration.py", tmp_path / "power_iteration.py")
    result = subprocess.run([sys.executable, "-m", "mpfix", "verify", "power_iteration.py", "--steps", "3",
                             "--device", "cpu", "--no-baseline"], cwd=tmp_path, env=tf_env(), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 10, result.stdout + result.stderr
    assert "power_iteration.py:33:9: MP901 float16 `While` gave inf/NaN from finite inputs at step 0" \
        in result.stdout, result.stdout


def _repair(tmp_path: Path, name: str, text: str | None = None) -> tuple[subprocess.CompletedProcess, dict, str]:
    run = repair_copy(tmp_path, SCRIPTS / name, text=text)
    return run.result, run.report, run.after


@pytest.mark.slow
def test_repair_puts_the_layer_of_a_while_loop_body_in_float32(tmp_path):
    result, data, after = _repair(tmp_path, "power_iteration.py")
    assert result.returncode == 0 and "power_iteration.py: non-finite -> healthy" in result.stdout, result.stdout
    assert [(c["kind"], c["line"]) for c in data["changes"]] == [("float32 layer", 44)], data["changes"]
    assert 'SpectralDense(64, dtype="float32"),' in after, after


@pytest.mark.slow
def test_repair_judges_a_change_over_the_loss_scales_warm_up(tmp_path):
    # leaky_scan trained for 10 epochs (40 steps): the float32 integrator leaves a float16 Dense whose gradients
    # need ~11 halvings of the scale, so its 10-step run skipped every step.
    text = (SCRIPTS / "leaky_scan.py").read_text().replace("epochs=3", "epochs=10")
    result, data, after = _repair(tmp_path, "leaky_scan.py", text)
    assert result.returncode == 0 and "leaky_scan.py: non-finite -> healthy" in result.stdout, result.stdout
    (kept,) = [t for t in data["trials"] if t["kept"]]
    assert kept["kind"] == "float32 layer" and "still warming up" in kept["reason"], data["trials"]
    assert "LeakyIntegrator(dtype=\"float32\")," in after, after


@pytest.mark.slow
def test_repair_keeps_one_island_from_a_small_temperature_to_the_softmax(tmp_path):
    shutil.copy(SCRIPTS / "pool_config.json", tmp_path / "pool_config.json")
    result, data, after = _repair(tmp_path, "pool_temperature.py")
    assert result.returncode == 0 and "pool_temperature.py: non-finite -> healthy" in result.stdout, result.stdout
    assert [(c["kind"], c["line"]) for c in data["changes"]] == [("float32 island", 30)], data["changes"]
    assert "weights = tf.cast(tf.nn.softmax(" in after and "axis=1), self.compute_dtype)" in after, after


@pytest.mark.slow
def test_repair_computes_a_keras3_activity_penalty_in_float32(tmp_path):
    result, data, after = _repair(tmp_path, "activity_l1.py")
    assert result.returncode == 0 and "activity_l1.py: crashed -> healthy" in result.stdout, result.stdout
    assert [(c["kind"], c["line"]) for c in data["changes"]] == [("float32 island", 19)], data["changes"]
    assert "return 1e-6 * tf.reduce_sum(tf.abs(tf.cast(activations, tf.float32)))" in after, after
