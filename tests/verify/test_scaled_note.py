"""Applied gradients ~a loss scale times float32's: scaled gradients reached an optimizer that does not
unscale them (wave 7's accum_inner_apply_k3: `scale_loss` gradients stepped through `inner_optimizer`)."""

from __future__ import annotations

from pathlib import Path

from mpfix.verify import candidates
from mpfix.verify.baseline_notes import scaled_gradients_note
from mpfix.verify.changes import ChangeKind
from mpfix.verify.records import RunResult, Step
from mpfix.verify.verdict import SCALED_CAUSE, judge

NAN = float("nan")


def _run(mode, norms, losses=None, policy=None):
    losses = losses or [1.0] * len(norms)
    policy = policy or ("mixed_float16" if mode == "mixed" else "float32")
    return RunResult(mode, end={"event": "end", "status": "finished", "policies": {"global": policy}},
                     returncode=0,
                     steps=[Step(i, x, 1.0, False, False, 0.0 if n == n and n != float("inf") else 1.0, 0.0, n)
                            for i, (x, n) in enumerate(zip(losses, norms))])


FLOAT32 = _run("float32", [4.78, 3.99, 3.18, 2.9, 2.7], [0.524, 0.30, 0.21, 0.2, 0.19])


def test_gradients_a_loss_scale_above_float32s_are_named():
    mixed = _run("mixed", [156776.5, float("inf")], [0.524, NAN])
    note = scaled_gradients_note(mixed, FLOAT32)
    assert note is not None and "~32768" in note and "does not unscale them" in note
    # Gradients as float32's (an unscaled or well-scaled step), or a first step already non-finite: no claim.
    assert scaled_gradients_note(_run("mixed", [4.79, float("inf")], [0.524, NAN]), FLOAT32) is None
    assert scaled_gradients_note(_run("mixed", [float("inf")], [NAN]), FLOAT32) is None
    # A baseline that did not run in float32 compares nothing.
    assert scaled_gradients_note(mixed, _run("float32", [4.78] * 3, policy="mixed_float16")) is None


def test_the_non_finite_verdict_carries_the_cause_and_repair_tries_loss_scaling_first():
    mixed = _run("mixed", [156776.5, float("inf")], [0.524, NAN])
    verdict = judge(mixed, FLOAT32, Path("script.py"), baseline_expected=True)
    assert verdict.name == "non-finite" and verdict.evidence["cause"] == SCALED_CAUSE, verdict
    assert "does not unscale them" in verdict.notes[0]
    offered = candidates.for_verdict(verdict, mixed, [], lambda p: None, [Path("script.py")], lambda p: p)
    assert offered and offered[0].kind is ChangeKind.LOSS_SCALING, offered
    # Without the cause the same verdict offers no loss-scaling change.
    plain = judge(_run("mixed", [4.79, float("inf")], [0.524, NAN]), FLOAT32, Path("script.py"), baseline_expected=True)
    assert plain.name == "non-finite" and "cause" not in plain.evidence
    assert all(c.kind is not ChangeKind.LOSS_SCALING
               for c in candidates.for_verdict(plain, mixed, [], lambda p: None, [Path("script.py")], lambda p: p))


def test_no_update_under_mixed_precision_beside_a_float32_run_that_trains_is_stalled():
    """wave 8's skip_spike_k3: `if global_norm(scaled grads) < 50: apply_gradients(...)` never lets a step through."""
    empty = RunResult("mixed", end={"event": "end", "status": "finished", "policies": {"global": "mixed_float16"}},
                      returncode=0)
    verdict = judge(empty, FLOAT32, Path("script.py"), baseline_expected=True)
    assert verdict.name == "stalled" and verdict.evidence == {"kind": "no-updates", "float32_steps": 5}, verdict
    assert "float32 applied 5 steps" in verdict.summary
    offered = candidates.for_verdict(verdict, empty, [], lambda p: None, [Path("script.py")], lambda p: p)
    assert [c.kind for c in offered][:1] == [ChangeKind.LOSS_SCALING]
    # Without a float32 run that trains, it stays no-steps (the script may not train at all).
    assert judge(empty, None, Path("script.py"), baseline_expected=False).name == "no-steps"
    assert judge(empty, _run("float32", []), Path("script.py"), baseline_expected=True).name == "no-steps"


def test_a_non_finite_op_of_the_compiled_loss_offers_each_model_output_layer_float32(tmp_path):
    """wave 8's multi_output_k2: tf_keras casts ~2000 price targets to a float16 `Dense(1)` head and `mse` squares
    past 65504; the op sits at the `fit` line (no layer built it), where no island can be written."""
    from mpfix.verify.evidence import Kind, RuntimeFinding

    script = tmp_path / "train.py"
    mixed = _run("mixed", [float("inf")], [float("inf")])
    mixed.layers = {
        "3": {"name": "dense_2", "class": "Dense", "file": str(script), "line": 18, "code": "x = Dense(6)(h)"},
        "4": {"name": "price", "class": "Dense", "file": str(script), "line": 20, "output_of": "model",
              "code": 'price = keras.layers.Dense(1, name="price")(h)'},
        "6": {"name": "mean_squared_error", "class": "LossFunctionWrapper", "file": None, "output_of": None},
    }
    verdict = judge(mixed, FLOAT32, script, baseline_expected=True)
    assert verdict.name == "non-finite"
    op = RuntimeFinding("MP203", "float16 `SquaredDifference` gave inf/NaN", str(script), 39, 1, Kind.NONFINITE,
                        "SquaredDifference", step=0)
    text = "x = 1\n" * 40

    layers = [c for c in candidates.for_verdict(verdict, mixed, [op], lambda p: text, [script], lambda p: p)
              if c.kind is ChangeKind.LAYER]
    assert [(c.line, c.class_name) for c in layers] == [(20, "Dense")], layers
    # An op a layer built is that layer's: no output-layer guess.
    owned = RuntimeFinding(**{**op.__dict__, "owner": mixed.layers["3"]})
    layers = [c for c in candidates.for_verdict(verdict, mixed, [owned], lambda p: text, [script], lambda p: p)
              if c.kind is ChangeKind.LAYER]
    assert [c.line for c in layers] == [18]


def test_the_advice_for_no_updates_is_to_compare_the_unscaled_value_not_a_fixed_scale():
    from types import SimpleNamespace

    from mpfix.verify.escalate import escalation

    empty = RunResult("mixed", end={"event": "end", "status": "finished", "policies": {"global": "mixed_float16"}},
                      returncode=0)
    verdict = judge(empty, FLOAT32, Path("script.py"), baseline_expected=True)
    for keras, spelling in ((3, "optimizer.dynamic_scale"), (2, "optimizer.loss_scale")):
        report = SimpleNamespace(verdict=verdict, keras=keras, location=None, options=SimpleNamespace(locate=False))
        (advice,) = escalation(report)
        assert spelling in advice and "fixed loss scale" not in advice
