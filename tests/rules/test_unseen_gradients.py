"""Gradient-path classes found missing on the held-out scripts of ``benchmarks/unseen`` (issue 18):
each test is a realistic snippet of the class, not the benchmark file.

Object state: gradients that one method keeps in an object (an accumulator) and another method
clips and applies are a flow of their own (``Analysis.cross_flows``); every rule about what happens
to gradients on their way to an update reads those flows too.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP1 = tuple(r for r in all_rules() if r.code.startswith("MP1"))
_IMPORT = {3: "import keras", 2: "import tf_keras as keras"}


def lint(code: str, keras: int, *, fix: bool = False):
    engine = Engine(MP1, Options(keras=str(keras), unsafe_fixes=True, project_policy=False))
    return engine.lint(textwrap.dedent(code).lstrip("\n"), Path("train.py"), fix=fix)


ACCUMULATING_TRAINER = """
    {import_keras}
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")
    MICRO_STEPS = 8


    class MicroBatchAccumulator:
        def __init__(self, variables):
            self.variables = variables
            self.buffers = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]

        def accumulate(self, grads):
            for buf, g in zip(self.buffers, grads):
                buf.assign_add(g)

        def step(self, optimizer, max_norm):
            grads = [buf / MICRO_STEPS for buf in self.buffers]
            {apply_body}
            for buf in self.buffers:
                buf.assign(tf.zeros_like(buf))


    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1, dtype="float32")])
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
    accumulator = MicroBatchAccumulator(model.trainable_variables)


    @tf.function
    def micro_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            scaled = optimizer.{scale}(loss)
        accumulator.accumulate(tape.gradient(scaled, model.trainable_variables))
        return loss


    for i, (x, y) in enumerate(batches):
        micro_step(x, y)
        if (i + 1) % MICRO_STEPS == 0:
            accumulator.step(optimizer, 1.0)
"""


def _trainer(keras: int, apply_body: str) -> str:
    scale = "scale_loss" if keras == 3 else "get_scaled_loss"
    code = textwrap.dedent(ACCUMULATING_TRAINER.format(import_keras=_IMPORT[keras], scale=scale,
                                                       apply_body=apply_body))
    compile(code, "train.py", "exec")  # a snippet that does not parse would pass "no findings" vacuously
    return code


CLIP_THEN_APPLY = """grads, _ = tf.clip_by_global_norm(grads, max_norm)
            optimizer.apply_gradients(zip(grads, self.variables))"""


def test_keras3_clip_of_accumulated_scaled_gradients_in_another_method_is_mp109():
    found = lint(_trainer(3, CLIP_THEN_APPLY), 3).findings
    assert [(f.code, f.line) for f in found] == [("MP109", 19)]
    # the threshold is a parameter: nothing to move into the optimizer
    assert found[0].fix is None


def test_keras2_clip_before_the_unscale_in_the_applying_method_is_mp109():
    body = """grads = [tf.clip_by_norm(g, max_norm) for g in grads]
            grads = optimizer.get_unscaled_gradients(grads)
            optimizer.apply_gradients(zip(grads, self.variables))"""
    found = lint(_trainer(2, body), 2).findings
    assert [(f.code, f.line) for f in found] == [("MP109", 19)]


def test_keras2_accumulated_scaled_gradients_applied_without_unscale_are_mp103():
    body = "optimizer.apply_gradients(zip(grads, self.variables))"
    found = lint(_trainer(2, body), 2).findings
    assert [(f.code, f.line) for f in found] == [("MP103", 19)]


@pytest.mark.parametrize("keras", [2, 3])
def test_an_accumulator_that_unscales_before_clipping_is_left_alone(keras):
    if keras == 3:
        # Keras 3: the inner optimizer clips after the LossScaleOptimizer unscaled.
        body = "optimizer.apply_gradients(zip(grads, self.variables))"
    else:
        body = """grads = optimizer.get_unscaled_gradients(grads)
            grads, _ = tf.clip_by_global_norm(grads, max_norm)
            optimizer.apply_gradients(zip(grads, self.variables))"""
    assert lint(_trainer(keras, body), keras).findings == []
