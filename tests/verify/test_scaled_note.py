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
