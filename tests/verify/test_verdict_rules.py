"""Verdict thresholds on synthetic step records (no TensorFlow)."""

from __future__ import annotations

import math
from pathlib import Path

from mpfix.verify.records import RunResult, Step, parse_run
from mpfix.verify.verdict import judge

SCRIPT = Path(__file__).parent / "scripts" / "healthy_fit.py"
END = {"event": "end", "status": "stopped"}


def run(losses, *, mode="mixed", scale=32768.0, dynamic=True, skipped=False, zeros=0.0, nonfinite=0.0):
    steps = [
        Step(i, loss, scale if not callable(scale) else scale(i), dynamic, skipped, nonfinite, zeros, 1.0)
        for i, loss in enumerate(losses)
    ]
    return RunResult(mode, steps=steps, end=dict(END))


def falling(n=10, start=2.0, rate=0.9):
    return [start * rate**i for i in range(n)]


def test_healthy_when_close_to_float32():
    v = judge(run(falling()), run(falling(), mode="float32"), SCRIPT)
    assert v.name == "healthy" and v.exit_code == 0


def test_diverged_when_the_tail_is_far_and_consistently_off():
    base = run(falling(), mode="float32")
    slightly = run([x * 1.05 for x in falling()])
    assert judge(slightly, base, SCRIPT).name == "healthy"
    far = run([2.0] * 5 + [1.9] * 5)
    v = judge(far, base, SCRIPT)
    assert v.name == "diverged" and v.exit_code == 13
    assert v.evidence["relative_difference"] > 0.25 and "higher" in v.summary
    # Ending far *below* float32 is just as suspicious.
    assert judge(run([x * 0.5 for x in falling()]), base, SCRIPT).name == "diverged"


def test_diverged_is_judged_on_the_final_losses_not_the_starting_one():
    """The case the old rule (10% of max(first loss, final loss)) missed on a real script:
    both start at ~10, float32 reaches ~1e-6, mixed plateaus at ~0.33 (float16 rounding)."""
    base = run([10.0 * 0.5**i for i in range(20)], mode="float32")
    mixed = run([10.0 * 0.5**i for i in range(5)] + [0.33 + 0.02 * (-1) ** i for i in range(15)])
    v = judge(mixed, base, SCRIPT)
    assert v.name == "diverged", v.summary
    assert v.evidence["float32_final_loss"] < 1e-3 and 0.3 < v.evidence["final_loss"] < 0.36
    assert v.evidence["tail_steps"] == 5


def test_a_gap_that_noise_could_make_is_not_diverged():
    base = run([1.0] * 10, mode="float32")
    # Tail mean 1.5 vs 1.0 (33% apart) but the step-by-step difference flips sign.
    noisy = run([1.0] * 5 + [0.2, 2.8, 0.2, 2.8, 2.5])
    v = judge(noisy, base, SCRIPT)
    assert v.name == "healthy", v.summary
    # The same gap, every step: diverged.
    assert judge(run([1.0] * 5 + [1.5] * 5), base, SCRIPT).name == "diverged"


def test_several_optimizers_are_steps_of_updates_and_judged_each():
    def gan(d_tail, mode="mixed"):
        steps = []
        for i in range(10):
            d = 1.0 if i < 5 else d_tail
            steps.append(Step(i, d, 1.0, True, False, 0.0, 0.0, 1.0, optimizer=0))
            steps.append(Step(i, 0.7, 1.0, True, False, 0.0, 0.0, 1.0, optimizer=1))
        return RunResult(mode, steps=steps, end=dict(END))

    base = gan(1.0, mode="float32")
    assert base.step_count == 10 and base.optimizers == [0, 1] and len(base.steps) == 20
    assert base.finite_losses == [1.0] * 10  # the first optimizer's, not interleaved
    v = judge(gan(1.0), base, SCRIPT)
    assert v.name == "healthy" and "10 steps (2 optimizers, 20 updates)" in v.summary
    v = judge(gan(3.0), base, SCRIPT)
    assert v.name == "diverged" and v.evidence["optimizer"] == 0 and "optimizer #0" in v.summary


def test_underflow_needs_a_gap_to_float32():
    base_zero = run(falling(), mode="float32", zeros=0.4)
    assert judge(run(falling(), zeros=0.6), base_zero, SCRIPT).name == "healthy"
    v = judge(run(falling(), zeros=0.95), base_zero, SCRIPT)
    assert v.name == "underflow" and v.exit_code == 12
    # Without a baseline only an overwhelming share counts.
    assert judge(run(falling(), zeros=0.8), None, SCRIPT).name == "healthy"
    assert judge(run(falling(), zeros=0.95), None, SCRIPT).name == "underflow"


def test_stalled_when_the_scaler_skips_the_second_half():
    scales = lambda i: max(32768.0 / 2**i, 1.0)  # noqa: E731
    v = judge(run([3.0] * 20, scale=scales, skipped=True, nonfinite=1.0), None, SCRIPT)
    assert v.name == "stalled" and v.exit_code == 11
    assert v.evidence["last_scale"] == 1.0 and "floor" in v.summary


def test_stalled_when_keras3_scale_collapses():
    v = judge(run(falling(), scale=lambda i: 2.0**-20), None, SCRIPT)
    assert v.name == "stalled" and "collapsed" in v.summary


def test_frozen_loss_is_stalled_only_if_float32_moves():
    frozen = run([1.5] * 8)
    assert judge(frozen, run(falling(8), mode="float32"), SCRIPT).name == "stalled"
    assert judge(frozen, run([1.5] * 8, mode="float32"), SCRIPT).name == "healthy"


def test_non_finite_reports_first_step_and_what():
    r = run([1.0, 0.9, float("nan"), float("nan")])
    v = judge(r, None, SCRIPT)
    assert v.name == "non-finite" and v.evidence["step"] == 2 and v.evidence["in"] == "loss"
    # Non-finite gradients applied (no dynamic scaler) with a finite loss.
    g = run([1.0, 0.9], dynamic=False, nonfinite=0.5)
    v = judge(g, None, SCRIPT)
    assert v.name == "non-finite" and v.evidence["in"] == "gradients" and v.evidence["step"] == 0


def test_skipped_overflow_steps_are_not_non_finite():
    r = run(falling(), skipped=False)
    r.steps[0].skipped, r.steps[0].nonfinite_fraction = True, 1.0
    assert judge(r, None, SCRIPT).name == "healthy"


def test_child_dying_silently_is_crashed():
    r = RunResult("mixed", end=None, returncode=-9, stderr_tail="Killed\n")
    v = judge(r, None, SCRIPT)
    assert v.name == "crashed" and "exit status -9" in v.summary


def test_records_decode_non_finite_strings_and_stop_at_torn_line(tmp_path):
    from mpfix.verify.records import read_events

    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"event": "step", "step": 0, "loss": "nan", "loss_scale": "inf", "grad_norm": "-inf"}\n{"event": "st'
    )
    r = parse_run("mixed", read_events(path))
    assert len(r.steps) == 1 and math.isnan(r.steps[0].loss)
    assert r.steps[0].loss_scale == math.inf and r.steps[0].grad_norm == -math.inf


def _scaled_run(skipped_steps, n=30, start=32768.0):
    steps, scale = [], start
    for i in range(n):
        skip = i in skipped_steps
        steps.append(Step(i, 1.0 - 0.01 * i, scale, True, skip, 1.0 if skip else 0.0, 0.0, 1.0))
        if skip:
            scale /= 2
    return RunResult("mixed", steps=steps, end=dict(END))


def test_loss_scale_falling_with_more_and_more_skips_is_at_risk():
    # Warm-up (0-2), then skips that come more and more often.
    rising = _scaled_run({0, 1, 2, 20, 24, 26, 28})
    v = judge(rising, None, SCRIPT)
    assert v.name == "at-risk" and v.exit_code == 17, v.summary
    assert v.evidence["kind"] == "loss-scale" and v.evidence["skipped_second_half"] > v.evidence["skipped_first_half"]
    # Skips that thin out (the scaler settling) are not a trend.
    settling = _scaled_run({0, 1, 2, 4, 7, 12, 20})
    assert judge(settling, None, SCRIPT).name == "healthy"


def test_float16_output_near_65504_is_at_risk_with_the_layer():
    r = run(falling())
    for s in r.steps:
        s.act_max, s.act_layer = 100.0 * (s.step + 1) ** 3, 0  # 100 ... 100000 (inf later)
    r.steps[-1].act_max = 9000.0
    r.layers = {0: {"name": "dense_1", "class": "Dense", "file": str(SCRIPT), "line": 29, "output_of": "sequential"}}
    v = judge(r, None, SCRIPT)
    assert v.name == "at-risk", v.summary
    assert v.evidence["step"] == 4 and v.evidence["value"] == 12500.0  # first step >= 65504 / 8
    assert v.evidence["peak_step"] == 8 and v.evidence["rule"] == "MP205"
    assert "healthy_fit.py:29" in v.summary
    # Far below the threshold: healthy.
    for s in r.steps:
        s.act_max = 50.0
    assert judge(r, None, SCRIPT).name == "healthy"


def test_growing_loss_is_unstable_only_when_float32_grows_too():
    growing = [2.0 * 3**i for i in range(12)]
    assert judge(run(growing), run(growing, mode="float32"), SCRIPT).name == "unstable"
    # float32 converges: the mixed run is what diverges.
    assert judge(run(growing), run(falling(12), mode="float32"), SCRIPT).name == "diverged"
    v = judge(run(growing), None, SCRIPT, baseline_expected=False)
    assert v.name == "unstable" and "--no-baseline" in v.summary


def test_a_lag_of_skipped_warmup_steps_is_not_diverged():
    base = run([80.0 - 2.0 * i for i in range(40)], mode="float32", scale=1.0, dynamic=False)
    # Mixed skips its first 3 steps, then follows float32 exactly, 3 updates behind: at
    # each step it is 6 above float32 (40 % over the tail).
    losses = [80.0] * 3 + [80.0 - 2.0 * (i - 3) for i in range(3, 40)]
    mixed = run(losses)
    for s in mixed.steps[:3]:
        s.skipped, s.nonfinite_fraction = True, 1.0
    v = judge(mixed, base, SCRIPT)
    assert v.name == "healthy", v.summary
    assert any("lags float32" in n for n in v.notes)
    # A real gap beyond the lag still counts.
    worse = run([x + 10.0 for x in losses])
    for s in worse.steps[:3]:
        s.skipped, s.nonfinite_fraction = True, 1.0
    assert judge(worse, base, SCRIPT).name == "diverged"
