"""A repair that takes two float32 layers, the second one named only by the first's run (turn 18).

``running_total_rnn.py`` on tf_keras: the RNN (and its cell) in float32 ends the forward overflow, but the float16
``Dense(16)`` after it then has kernel gradients past 65504 at the loss scale's floor of 1.0: every update is
skipped ("stalled"). Before, that trial was "not kept" (its loss could not agree with float32's), and repair ended
with nothing. Now an overflow moved from the forward pass into the gradients is progress, like a NaN moved
downstream: the next round offers what the stalled run names (its largest float16 layers), and the pair is healthy.
A stall that no later change ends is never written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mpfix.verify.changes import Change, ChangeKind
from mpfix.verify.records import RunResult, Step
from mpfix.verify.repair_progress import PROGRESS, Outcome, into_gradients, unproven
from mpfix.verify.verdict import Verdict
from verify_helpers import repair_copy

SCRIPTS = Path(__file__).parent / "scripts" / "repair"
NAN = float("nan")


def _run(losses: list[float], skipped: list[bool]) -> RunResult:
    run = RunResult("mixed")
    run.steps = [Step(k, loss, 2.0 ** -k, True, skip, 0.0, 0.0, 1.0) for k, (loss, skip) in enumerate(zip(losses,
                                                                                                        skipped))]
    return run


def _outcome(name: str, run: RunResult) -> Outcome:
    return Outcome(Verdict(name, name), run)


NONFINITE = _outcome("non-finite", _run([NAN] * 4, [True] * 4))


def test_an_overflow_moved_into_the_gradients_is_progress_only_from_a_nan_to_finite_losses_never_applied():
    assert into_gradients(NONFINITE, _outcome("stalled", _run([3.0, 3.1, 3.0, 3.2], [True] * 4)))
    # A loss still non-finite somewhere, an update applied, a verdict that was not a NaN's, or not a stall: no.
    assert not into_gradients(NONFINITE, _outcome("stalled", _run([3.0, NAN, 3.0, 3.2], [True] * 4)))
    assert not into_gradients(NONFINITE, _outcome("stalled", _run([3.0, 3.1, 3.0, 3.2], [True] * 3 + [False])))
    assert not into_gradients(_outcome("underflow", _run([3.0] * 4, [False] * 4)),
                               _outcome("stalled", _run([3.0] * 4, [True] * 4)))
    assert not into_gradients(NONFINITE, _outcome("diverged", _run([3.0] * 4, [True] * 4)))


def _change(progress: str | None = None) -> Change:
    change = Change(ChangeKind.LAYER, Path("train.py"), "dtype=float32 on `rnn`", "evidence")
    if progress:
        change.extra[PROGRESS] = progress
    return change


def test_a_stall_the_overflow_moved_into_is_never_kept_by_itself():
    stalled = _outcome("stalled", _run([3.0] * 4, [True] * 4))
    healthy = _outcome("healthy", _run([3.0, 2.0, 1.0, 0.5], [False] * 4))
    assert unproven([_change("gradients")], stalled, NONFINITE) == \
        "the overflow moved into the gradients and no change ended it: nothing is kept"
    # Ended by a later change: kept; a stall reached without such progress: a better verdict, kept as before.
    assert unproven([_change("gradients"), _change()], healthy, NONFINITE) is None
    assert unproven([_change()], stalled, NONFINITE) is None
    assert unproven([_change()], _outcome("non-finite", NONFINITE.run), NONFINITE) == \
        "no change made the verdict better: nothing is kept"


@pytest.mark.slow
@pytest.mark.keras2
def test_repair_on_tf_keras_makes_the_rnn_then_the_dense_its_gradients_overflow_in_float32(tmp_path):
    run = repair_copy(tmp_path, SCRIPTS / "running_total_rnn.py", legacy=True)
    result, data, after = run.result, run.report, run.after
    assert result.returncode == 0 and "running_total_rnn.py: non-finite -> healthy" in result.stdout, result.stdout
    assert [(c["kind"], c["line"]) for c in data["changes"]] == [("float32 layer", 41), ("float32 layer", 42)], \
        data["changes"]
    first = next(t for t in data["trials"] if t["kept"])
    assert first["verdict_after"] == "stalled" and "moved into the gradients" in first["reason"], data["trials"]
    assert 'keras.layers.RNN(RunningTotalCell(16, HOURS, dtype="float32"), dtype="float32"),' in after, after
    assert 'keras.layers.Dense(16, activation="relu", dtype="float32"),' in after, after
