"""repair past "stalled" when a same-file helper clips the gradients of a scaled loss (turn 20; held-out
agc_train_step_k3 ended "stalled -> stalled" in turn 19: MP109 had no fix there). The fact repair uses is MP109's
new fix: on Keras 3 the helper gets the gradients divided by ``optimizer.scale_loss(1.0)`` and its result is
multiplied back for ``apply``. ``clip_per_tensor_k3.py`` (a small script written for this test, not a held-out one)
clips each gradient tensor to a norm of 1.0 in a helper: stalled -> healthy in 4 runs, final loss = float32's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mpfix.verify.changes import static_findings, static_fixed
from verify_helpers import repair_copy

SCRIPT = Path(__file__).parent / "scripts" / "repair" / "clip_per_tensor_k3.py"


def test_the_static_stage_has_a_fix_for_the_clip_helper_under_the_runs_policy():
    text = SCRIPT.read_text()
    found = [f for f in static_findings(text, SCRIPT, "mixed_float16", "3") if f.code == "MP109"]
    assert len(found) == 1 and found[0].fixable(True)
    after = static_fixed(text, SCRIPT, ("MP",), None, "mixed_float16", None, "3")
    assert after is not None and "loss_scale = self.optimizer.scale_loss(1.0)\n" in after
    assert "grads = [None if g is None else keras.ops.multiply(g, loss_scale) for g in grads]\n" in after
    # control: the same helper on gradients of an unscaled loss through a bare optimizer: nothing to fix here
    bare = text.replace("scaled_loss = self.optimizer.scale_loss(loss)", "scaled_loss = loss")
    assert [f for f in static_findings(bare, SCRIPT, "mixed_float16", "3") if f.code == "MP109"] == []


@pytest.mark.slow
def test_repair_ends_the_stall_of_a_clip_helper_on_keras3(tmp_path):
    run = repair_copy(tmp_path, SCRIPT)
    result, data = run.result, run.report
    assert result.returncode == 0 and "clip_per_tensor_k3.py: stalled -> healthy" in result.stdout, result.stdout
    assert [(c["kind"], c["verdict"]) for c in data["changes"]] == [("static fix", "healthy")], data["changes"]
    assert "MP109" in data["changes"][0]["evidence"]
    assert "        grads = [None if g is None else keras.ops.divide(g, loss_scale) for g in grads]\n" \
           "        grads = clip_each(grads)\n" in run.after, run.after


def test_the_advice_names_the_helpers_round_trip_on_keras3_only():
    """What a stall that repair could not end says (a helper it cannot fix: it reads the scale, gets zipped pairs)."""
    from types import SimpleNamespace

    from mpfix.verify.escalate import escalation
    from mpfix.verify.records import RunResult, Step
    from mpfix.verify.verdict import judge

    def run(mode, norms, scale):
        return RunResult(mode, end={"event": "end", "status": "finished",
                                    "policies": {"global": "mixed_float16" if mode == "mixed" else "float32"}},
                         returncode=0, steps=[Step(i, 1.0, scale, scale > 1, False, 0.0, 0.0, n)
                                              for i, n in enumerate(norms)])

    verdict = judge(run("mixed", [2.0 / 32768] * 10, 32768.0), run("float32", [2.0] * 10, 1.0), Path("s.py"),
                    baseline_expected=True)
    advice = {keras: escalation(SimpleNamespace(verdict=verdict, keras=keras, location=None,
                                                options=SimpleNamespace(locate=False)))[1] for keras in (2, 3)}
    assert "divided by `optimizer.scale_loss(1.0)`" in advice[3] and "multiplied back for `apply`" in advice[3]
    assert "scale_loss(1.0)" not in advice[2] and "get_unscaled_gradients" in advice[2]


K2_SCRIPT = SCRIPT.with_name("clip_helper_k2.py")


def test_tf_keras_the_static_stage_moves_the_unscale_out_from_around_the_helper():
    text = K2_SCRIPT.read_text()
    after = static_fixed(text, K2_SCRIPT, ("MP",), None, "mixed_float16", None, "2")
    assert after is not None and "grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, " \
                                 "model.trainable_variables))\n        grads = clip_each(grads)\n" in after, after


@pytest.mark.slow
def test_repair_ends_the_stall_of_a_clip_helper_inside_the_unscale_on_tf_keras(tmp_path):
    run = repair_copy(tmp_path, K2_SCRIPT, legacy=True)
    result, data = run.result, run.report
    assert result.returncode == 0 and "clip_helper_k2.py: stalled -> healthy" in result.stdout, result.stdout
    assert [(c["kind"], c["verdict"]) for c in data["changes"]] == [("static fix", "healthy")], data["changes"]
    assert "        grads = clip_each(grads)\n" in run.after and "get_unscaled_gradients(clip_each" not in run.after
