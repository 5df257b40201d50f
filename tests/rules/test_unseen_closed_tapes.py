"""A tape that a same-file function returns (``tape, loss = self.forward(batch)``) has stopped recording: its
``with`` block ended in that function. Scaling the loss in the caller is outside the tape, so every gradient
is None (MP104, wave 4 of the held-out scripts: scale_outside_tape_k2.py, ran: "No gradients provided").
The scaling cannot be moved into another function's block: reported without a fix."""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

TRAINER = """
    import tensorflow as tf
    {import_keras}


    class Trainer:
        def __init__(self, model):
            self.model = model
            self.optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))

        def forward(self, batch):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self.model(batch, training=True) - batch)){inside}
            return tape, loss

        def train_step(self, batch):
            tape, loss = self.forward(batch){outside}
            grads = tape.gradient({target}, self.model.trainable_variables){unscale}
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
"""

_CASES = {
    2: dict(import_keras="import tf_keras as keras", method="get_scaled_loss",
            unscale="\n            grads = self.optimizer.get_unscaled_gradients(grads)"),
    3: dict(import_keras="import keras", method="scale_loss", unscale=""),
}


def snippet(keras: int, scaled_inside: bool) -> str:
    case = _CASES[keras]
    scale = f"self.optimizer.{case['method']}(loss)"
    inside = f"\n                scaled = {scale}\n" if scaled_inside else ""
    outside = "" if scaled_inside else f"\n            scaled = {scale}"
    code = TRAINER.format(import_keras=case["import_keras"], inside=inside, outside=outside, target="scaled",
                          unscale=case["unscale"])
    if scaled_inside:
        code = code.replace("return tape, loss", "return tape, scaled")
        code = code.replace("tape, loss = self.forward(batch)", "tape, scaled = self.forward(batch)")
    return code


def found(code: str, keras: int) -> list[tuple[str, int, bool]]:
    result = lint_snippet(code, "MP104", keras=keras, policy=None, fix=False, filename="train.py")
    return [(f.code, f.line, f.fix is not None) for f in result.findings]


@pytest.mark.parametrize("keras", [2, 3])
def test_scaling_after_a_returned_tape_is_outside_it(keras):
    assert found(snippet(keras, scaled_inside=False), keras) == [("MP104", 17, False)]


@pytest.mark.parametrize("keras", [2, 3])
def test_scaling_inside_the_helpers_block_is_right(keras):
    # No rule may call the returned loss unscaled: its scaling happened in the helper, out of this scope's sight.
    result = lint_snippet(snippet(keras, scaled_inside=True), keras=keras, policy="mixed_float16", filename="train.py")
    assert [(f.code, f.line) for f in result.findings] == []
