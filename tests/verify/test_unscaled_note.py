"""The note for applied gradients ~1/scale of float32's: a loss never scaled, divided by the scale anyway."""

from __future__ import annotations

from pathlib import Path

from mpfix.verify.baseline_notes import unscaled_gradients_note
from mpfix.verify.records import RunResult, Step
from mpfix.verify.verdict import judge


def _run(mode, norms, scale, losses=None):
    losses = losses or [1.0] * len(norms)
    return RunResult(mode, end={"event": "end", "status": "finished",
                                "policies": {"global": "mixed_float16" if mode == "mixed" else "float32"}},
                     returncode=0, steps=[Step(i, x, scale, scale > 1, False, 0.0, 0.0, n)
                                          for i, (x, n) in enumerate(zip(losses, norms))])


def test_applied_gradients_one_scale_below_float32s_are_named():
    float32 = _run("float32", [2.0, 1.9, 1.8, 1.7, 1.6, 1.5], 1.0)
    unscaled = _run("mixed", [2.0 / 32768, 1.9 / 32768, 1.8 / 32768, 1.8 / 32768, 1.8 / 32768, 1.8 / 32768], 32768.0)
    note = unscaled_gradients_note(unscaled, float32)
    assert note is not None and "1/32768" in note and "not multiplied by the scale" in note
    assert "clipped or normalised before the loss scale optimizer divided them" in note  # the other cause
    # A scaled loss: the applied (unscaled) gradients are float32's.
    assert unscaled_gradients_note(_run("mixed", [2.0, 1.9, 1.8, 1.7, 1.6, 1.5], 32768.0), float32) is None
    # No loss scale optimizer, a small scale, or too few steps: no claim.
    assert unscaled_gradients_note(_run("mixed", [2e-5] * 6, 1.0), float32) is None
    assert unscaled_gradients_note(_run("mixed", [2e-5] * 6, 8.0), float32) is None
    assert unscaled_gradients_note(_run("mixed", [2e-5] * 2, 32768.0), float32) is None


def test_ten_steps_that_look_healthy_are_stalled_by_unscaled_gradients():
    float32 = _run("float32", [2.0] * 10, 1.0, [1.42 - 0.034 * i for i in range(10)])
    mixed = _run("mixed", [2.0 / 32768] * 10, 32768.0, [1.42 + 0.003 * i for i in range(10)])
    verdict = judge(mixed, float32, Path("script.py"), baseline_expected=True)
    assert verdict.name == "stalled" and "not multiplied by the scale" in verdict.summary, verdict
    assert verdict.evidence["kind"] == "unscaled-gradients"


def test_the_advice_names_both_causes_for_each_generation():
    """Held-out agc_train_step_k3 (turn 19): `scale_loss`'s gradients clipped adaptively before the optimizer unscaled
    them gave the same ~1/32768 updates as a loss never scaled; the advice only named the second."""
    from types import SimpleNamespace

    from mpfix.verify.escalate import escalation

    float32 = _run("float32", [2.0] * 10, 1.0)
    verdict = judge(_run("mixed", [2.0 / 32768] * 10, 32768.0), float32, Path("script.py"), baseline_expected=True)
    for keras, clip in ((3, "inner optimizer's `clipnorm`/`global_clipnorm`"), (2, "`optimizer.get_unscaled_gradients`")):
        report = SimpleNamespace(verdict=verdict, keras=keras, location=None, options=SimpleNamespace(locate=False))
        scale, unscaled = escalation(report)
        assert "scale the loss the optimizer unscales" in scale and clip in unscaled and "MP109" in unscaled
