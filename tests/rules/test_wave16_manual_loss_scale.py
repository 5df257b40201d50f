"""Wave 16 of ``benchmarks/unseen`` (turn 20, scored untuned): static_scale_ln_k3_ok.py scales its loss by hand
(``scaled = loss * LOSS_SCALE`` with ``LOSS_SCALE = 1024.0`` in the tape, the gradients divided by LOSS_SCALE,
the step skipped unless every gradient is finite, a plain AdamW). MP101 reported "no loss scaling" and its fix
wrapped the optimizer and scaled again: every step was non-finite, the guard skipped them all and the loss stayed
at 1.322 (as written: every step finite, accuracy 1.00). The fact missing: a fixed factor >= 128 on the loss
whose gradients are divided by it before the update is loss scaling.
"""

from __future__ import annotations

import textwrap

from mpfix.testing import lint_snippet

STEP = """
    import keras
    import tensorflow as tf

    VOCAB, LOSS_SCALE = 500, {scale}
    keras.mixed_precision.set_global_policy("mixed_float16")
    optimizer = keras.optimizers.AdamW(1e-3)


    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
            scaled = {scaled}
        grads = tape.gradient(scaled, model.trainable_variables)
        grads = [{unscale} for g in grads]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        if finite:
            optimizer.apply(grads, model.trainable_variables)
        return loss
"""


def mp101(scale="1024.0", scaled="loss * LOSS_SCALE", unscale="tf.convert_to_tensor(g) / LOSS_SCALE",
          keras="3") -> list[int]:
    code = STEP.format(scale=scale, scaled=scaled, unscale=unscale)
    compile(textwrap.dedent(code).lstrip("\n"), "train.py", "exec")
    return [f.line for f in lint_snippet(code, ("MP101",), keras=keras, filename="train.py").findings]


def test_a_fixed_scale_by_hand_with_its_division_is_loss_scaling():
    assert mp101() == []
    assert mp101(scale="2 ** 15", scaled="LOSS_SCALE * loss") == []
    assert mp101(scaled="loss * 1024", unscale="tf.math.divide(g, 1024.0)") == []


def test_tf_keras_spelling_is_the_same_fact():
    assert mp101(keras="2") == []


def test_controls_keep_the_finding():
    # no division: the update is 1024 times too large, not loss scaling
    assert mp101(unscale="tf.convert_to_tensor(g)") == [18]
    # divided by another number
    assert mp101(unscale="g / 512.0") == [18]
    # a loss weight of 2 leaves float16 gradients as small as they were
    assert mp101(scale="2.0") == [18]
    # the plain unscaled step
    assert mp101(scaled="loss", unscale="g") == [18]
