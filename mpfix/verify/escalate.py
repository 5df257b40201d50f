"""Parent side: the documented last resorts, shown when a verdict stays bad.

Two exist (Keras mixed-precision guide, and docs/verify.md):

* a fixed loss scale: Keras 3 ``loss_scale_factor=N`` on the optimizer without a
  ``LossScaleOptimizer`` (and ``auto_scale_loss=False`` in ``compile``); Keras 2
  ``LossScaleOptimizer(opt, dynamic=False, initial_scale=N)``, whose caveat is that a step
  with non-finite gradients is then applied, not skipped;
* running the offending layer in float32 (``dtype="float32"``), when ``--locate`` found it.
"""

from __future__ import annotations

from mpfix.verify.verdict import NO_UPDATES, UNSCALED_KIND

# A power of two well below 65504 / typical gradient magnitudes, the usual choice for
# a fixed scale; the user tunes it.
FIXED_SCALE = 1024
# diverged: a fixed scale is offered only when the dynamic scaler skipped this share of
# the updates (otherwise the scale is not what made the run differ).
DIVERGED_SKIPPED_FRACTION = 0.25


def fixed_scale_edit(keras: int | None, scale: int = FIXED_SCALE) -> str:
    if keras == 2:
        return (
            f"fixed loss scale (Keras 2): optimizer = tf.keras.mixed_precision.LossScaleOptimizer("
            f"optimizer, dynamic=False, initial_scale={scale})\n"
            "  caveat: with a fixed scale a step whose gradients are non-finite is APPLIED "
            "(weights become inf/NaN), never skipped"
        )
    return (
        f"fixed loss scale (Keras 3): optimizer = keras.optimizers.Adam(..., loss_scale_factor={scale}) "
        "with no LossScaleOptimizer around it; with fit, also model.compile(..., auto_scale_loss=False)\n"
        "  caveat: a step whose gradients are non-finite is then applied, not skipped"
    )


def float32_layer_edit(location) -> str | None:
    if location is None or location.frame is None:
        return None
    return (
        f"run the layer at {location.where} in float32: pass dtype=\"float32\" to that layer's "
        "constructor (inputs are cast to float32 and it outputs float32); or compute that "
        "expression in float32 with tf.cast(..., tf.float32) and cast back to the input dtype"
    )


def escalation(report) -> list[str]:
    verdict = report.verdict
    if not verdict.bad or verdict.name in ("crashed", "timeout", "no-steps"):
        return []
    keras = report.keras
    out = []
    layer = float32_layer_edit(report.location)
    if verdict.name == "non-finite":
        if layer:
            out.append(layer)
        elif not report.options.locate:
            out.append("re-run with --locate to find the first op that produced NaN/Inf")
        if "loss" not in verdict.evidence.get("in", ""):
            # Only gradients overflowed: a smaller, fixed scale can keep them finite. A
            # non-finite loss comes from the forward pass, which no loss scale touches.
            out.append(fixed_scale_edit(keras))
    elif verdict.name == "stalled":
        last = verdict.evidence.get("last_scale")
        if verdict.evidence.get("kind") == NO_UPDATES:
            # The script's own condition held every update back; no loss scale changes that.
            current = "optimizer.loss_scale" if keras == 2 else "optimizer.dynamic_scale"
            out.append("a condition of the script on the gradients (a norm threshold, a finiteness check) reads them "
                       f"while they still carry the loss scale: compare the unscaled value (divide by `{current}`), "
                       "or leave skipping non-finite steps to the LossScaleOptimizer")
        elif verdict.evidence.get("kind") == UNSCALED_KIND:
            # The optimizer divides by a scale the loss never got: a (fixed) scale is already there.
            call = ("loss = optimizer.get_scaled_loss(loss) before tape.gradient, and "
                    "grads = optimizer.get_unscaled_gradients(grads)") if keras == 2 else \
                "loss = optimizer.scale_loss(loss) inside the tape, before tape.gradient"
            out.append(f"scale the loss the optimizer unscales: {call} (`mpfix apply --unsafe-fixes` writes it where "
                       "the step is in this file: MP102)")
            after = "after `optimizer.get_unscaled_gradients`" if keras == 2 else \
                ("with the inner optimizer's `clipnorm`/`global_clipnorm` (the LossScaleOptimizer unscales first); a "
                 "clipping helper (adaptive clipping) gets the gradients divided by `optimizer.scale_loss(1.0)` and "
                 "its result multiplied back for `apply`")
            out.append(f"where the loss is scaled, clip or normalise the gradients only once they are unscaled: {after} "
                       "(MP109)")
        elif last is not None and last <= 1.0:
            # Overflow even at scale 1: scaling cannot help, the forward/backward math must
            # leave float16.
            out.append(
                "gradients overflow even at loss scale 1.0: a scale cannot fix this; find the "
                "float16 op that overflows (exp, sums of squares, large constants) and run it in "
                "float32 (dtype=\"float32\" on its layer)"
            )
        else:
            out.append(fixed_scale_edit(keras))
    elif verdict.name == "underflow":
        out.append(
            "scale the loss: `mpfix apply` adds a dynamic LossScaleOptimizer and the scale_loss "
            "(Keras 3) / get_scaled_loss + get_unscaled_gradients (Keras 2) calls"
        )
        out.append(fixed_scale_edit(keras))
    elif verdict.name == "diverged":
        # Finite but systematically off: precision, not range. Rounding in a float16
        # output or reduction is the usual cause; a loss scale matters only if the
        # scaler kept skipping steps.
        if layer:
            out.append(layer)
        out.append(
            "keep the model's output in float32: dtype=\"float32\" on the last layer (Dense, or the "
            "final Activation), so predictions and the loss are not rounded to float16's 11 "
            "significant bits (spacing 2.0 between 2048 and 4096)"
        )
        out.append(
            "or keep the other precision-sensitive parts in float32: losses, normalisation, softmax, "
            "long sums (reduce_sum/reduce_mean over many float16 values)"
        )
        updates = report.mixed.steps
        if updates and sum(s.skipped for s in updates) / len(updates) >= DIVERGED_SKIPPED_FRACTION:
            out.append(fixed_scale_edit(keras))
    return out
