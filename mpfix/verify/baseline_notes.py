"""Parent side: what the float32 baseline says about a mixed run's failure (the verdict's notes).

A baseline that could not run gives no comparison; one that is non-finite at the same step says
the cause is not the policy, unless it computes in float16 too, where the script casts its own
data to float16 (which no policy undoes).
"""

from __future__ import annotations

import math
import os

from mpfix.verify.records import RunResult

# non-finite: the float32 baseline going non-finite this many steps later or sooner still
# counts as "the same failure".
SAME_FAILURE_STEPS = 1


def first_nonfinite(run: RunResult):
    """(step, what, value) of the first non-finite loss or applied non-finite gradients."""
    for s in run.steps:
        loss_bad = s.loss is not None and not math.isfinite(s.loss)
        grads_bad = s.nonfinite_fraction > 0 and not s.skipped
        if loss_bad or grads_bad:
            what = "loss and gradients" if loss_bad and s.nonfinite_fraction > 0 else ("loss" if loss_bad else "gradients")
            value = s.loss if loss_bad else s.grad_norm
            return s, what, value
    return None


def float32_run(run: RunResult) -> bool:
    """Whether the baseline really ran in float32 (its global policies, as recorded)."""
    policies = (run.end or {}).get("policies") or {}
    return all(p == "float32" for p in policies.values())


def own_float16(baseline: RunResult, until: int) -> str | None:
    """The name of a float16 output or loss targets that was inf/NaN in the float32 baseline by
    step ``until`` (only the script's own casts make float16 there), or None."""
    for s in baseline.steps:
        if s.step > until:
            break
        if s.act_max is not None and not math.isfinite(s.act_max) and s.act_layer is not None:
            return baseline.layers.get(s.act_layer, {}).get("name") or f"layer #{s.act_layer}"
    return None


def _cast_lines(run: RunResult) -> str:
    """" (its input pipeline casts at a.py:9, ...)" for the float16 casts of the run's tf.data maps."""
    where = list(dict.fromkeys(f"{os.path.basename(c['file'])}:{c['line']}" for c in run.data_casts if c.get("file")))
    return f" (its input pipeline casts at {', '.join(where[:3])})" if where else ""


def nonfinite_baseline_notes(mixed_step: int, baseline: RunResult) -> list[str]:
    bad = first_nonfinite(baseline)
    if bad is None:
        return []
    base_step = bad[0].step
    if not float32_run(baseline):
        policies = ", ".join(sorted(set(((baseline.end or {}).get("policies") or {}).values())))
        return [
            f"the baseline is non-finite too (from step {base_step}), but it did not run in float32 "
            f"(policy {policies}): no comparison"
        ]
    if base_step <= mixed_step + SAME_FAILURE_STEPS:
        own = own_float16(baseline, base_step)
        if own is not None:
            # A float16 value in the float32 run is the script's own cast (a tf.data map casting the
            # targets "for mixed precision"), which the policy does not undo: still a float16 bug.
            return [f"the float32 baseline is non-finite too (from step {base_step}), but it computes in float16 "
                    f"where the script casts to float16 itself{_cast_lines(baseline)}: `{own}` was inf/NaN at step "
                    f"{base_step} of both runs; keep that data float32 (float16 ends at 65504) and let the policy "
                    "cast inside the model"]
        if baseline.data_casts:
            # Its input pipeline makes float16 data itself (wave 9's tfdata_standardize_k2: `var + 1e-8` in a float16
            # map is 0/0 for a constant window), which no policy undoes: not a claim that mixed precision is innocent.
            return [f"the float32 baseline is non-finite too (from step {base_step}), but its input pipeline makes "
                    f"float16 data itself{_cast_lines(baseline)}, which no policy undoes: keep that data float32 and "
                    "let the policy cast inside the model"]
        return [f"the float32 baseline is non-finite too (from step {base_step}): the cause is not mixed precision"]
    return [
        f"float32 is non-finite too, but only from step {base_step} (mixed: step {mixed_step}): mixed "
        "precision fails first; the later float32 failure has a cause of its own (data, learning rate)"
    ]


def baseline_notes(baseline: RunResult | None) -> list[str]:
    if baseline is None:
        return []
    if baseline.timed_out:
        return ["the float32 baseline timed out: no comparison"]
    if baseline.crash is not None:
        return [f"the float32 baseline crashed ({baseline.crash.get('type')}): no comparison"]
    if not baseline.steps:
        return ["the float32 baseline made no optimizer step: no comparison"]
    return []


# The gradient norm a run records is the one applied (a loss scale optimizer's gradients divided by its
# scale: _measure_ops), so a scaled loss gives ~float32's. Applied gradients this many times under
# float32's over the first steps (from the same weights) are ~1/scale: a loss that was never scaled.
UNSCALED_FACTOR = 100.0
UNSCALED_STEPS = 5
UNSCALED_MIN_SCALE = 1024.0


def unscaled_gradients_note(mixed: RunResult, baseline: RunResult | None) -> str | None:
    """A note when the applied gradients are ~1/scale of float32's: the loss was not multiplied by the scale, or
    the scaled gradients were clipped to a float32-sized norm (held-out agc_train_step_k3: adaptive clipping of
    `scale_loss`'s gradients), yet the loss scale optimizer divides by it. The magnitudes cannot tell which."""
    if baseline is None or not float32_run(baseline):
        return None
    base = {s.step: s.grad_norm for s in baseline.steps if s.optimizer == 0}
    ratios, scales = [], []
    for s in mixed.steps:
        if s.optimizer != 0 or s.step >= UNSCALED_STEPS or s.skipped or not s.loss_scale:
            continue
        b = base.get(s.step)
        if s.loss_scale < UNSCALED_MIN_SCALE or not b or s.grad_norm is None or not math.isfinite(s.grad_norm):
            return None
        ratios.append(s.grad_norm / b)
        scales.append(s.loss_scale)
    if len(ratios) < 3 or any(r * scale >= UNSCALED_FACTOR for r, scale in zip(ratios, scales)):
        return None
    ratio = sorted(ratios)[len(ratios) // 2]
    return (f"the applied gradients are {ratio:.3g}x float32's at a loss scale of {scales[0]:g} (~1/{scales[0]:g}): "
            "the loss was not multiplied by the scale (`scale_loss`/`get_scaled_loss`), or the scaled gradients "
            "were clipped or normalised before the loss scale optimizer divided them by it; either way every update "
            "is that much too small")


# The other way round: applied gradients this many times float32's (from the same weights) still
# carry a loss scale (>= 1024 in every LossScaleOptimizer's dynamic range): nothing unscaled them
# before the optimizer that applied them. float16 rounding moves a gradient norm by far less.
SCALED_FACTOR = 256.0


def scaled_gradients_note(mixed: RunResult, baseline: RunResult | None) -> str | None:
    """A note when the first applied gradients (before any non-finite step) are ~a loss scale times
    float32's: scaled gradients reached an optimizer that does not unscale them."""
    if baseline is None or not float32_run(baseline):
        return None
    base = {s.step: s.grad_norm for s in baseline.steps if s.optimizer == 0}
    ratios = []
    for s in mixed.steps:
        if s.optimizer != 0 or s.step >= UNSCALED_STEPS or s.skipped:
            continue
        b = base.get(s.step)
        if s.grad_norm is None or not math.isfinite(s.grad_norm) or not b or not math.isfinite(b):
            break  # from the first non-finite step on, the weights differ
        ratios.append(s.grad_norm / b)
    if not ratios or any(r < SCALED_FACTOR for r in ratios):
        return None
    ratio = sorted(ratios)[len(ratios) // 2]
    scale = 2.0 ** round(math.log2(ratio))
    return (f"the applied gradients were {ratio:.3g}x float32's (~{scale:g}, a loss scale) before the first "
            "non-finite step: gradients of a scaled loss reached an optimizer that does not unscale them, so every "
            "update is that much too large and an overflow is never skipped")
