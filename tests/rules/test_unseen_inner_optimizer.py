"""Keras 2: gradients unscaled by a LossScaleOptimizer but applied through the optimizer it wraps
(``base_opt = Adam(); optimizer = LossScaleOptimizer(base_opt)``; ``base_opt.apply_gradients(...)``).
Found probing wave 6's shapes (turn 10). The LSO's ``apply_gradients`` is what skips a step with inf/NaN
gradients and lowers the dynamic scale; the inner optimizer does neither (ran, TF 2.21 CPU, targets ~300:
through the inner optimizer the weights are NaN after 6 steps and the scale stays 32768; through the LSO
they are finite and the scale drops to 512)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP1 = tuple(r for r in all_rules() if r.code.startswith("MP1"))

STEP = """
    import tensorflow as tf
    import tf_keras as keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.layers.Dense(64, input_shape=(8,)), keras.layers.Dense(1, dtype="float32")])
    base_opt = keras.optimizers.Adam(1e-3)
    optimizer = keras.mixed_precision.LossScaleOptimizer(base_opt)


    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            scaled = optimizer.get_scaled_loss(loss)
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
        {apply}.apply_gradients(zip(grads, model.trainable_variables))
        return loss
"""


def lint(apply: str):
    code = textwrap.dedent(STEP.format(apply=apply)).lstrip("\n")
    compile(code, "train.py", "exec")
    return Engine(MP1, Options(keras="2", unsafe_fixes=True, project_policy=False)).lint(code, Path("train.py"))


def test_keras2_unscaled_gradients_applied_through_the_inner_optimizer_are_mp111():
    found = lint("base_opt").findings
    assert [(f.code, f.line) for f in found] == [("MP111", 16)]
    assert "`optimizer.apply_gradients`" in found[0].message and "inf/NaN" in found[0].message


def test_the_fix_applies_through_the_loss_scale_optimizer():
    code = textwrap.dedent(STEP.format(apply="base_opt")).lstrip("\n")
    fixed = Engine(MP1, Options(keras="2", unsafe_fixes=True, project_policy=False)).lint(
        code, Path("train.py"), fix=True).fixed_text
    assert fixed == textwrap.dedent(STEP.format(apply="optimizer")).lstrip("\n")


def test_keras2_applied_through_the_loss_scale_optimizer_is_right():
    assert lint("optimizer").findings == []


def test_keras2_a_separate_plain_optimizer_for_unscaled_gradients_is_left_alone():
    # not the LSO's own inner optimizer: a split between two optimizers (MP111's valid example)
    code = STEP.replace("optimizer = keras.mixed_precision.LossScaleOptimizer(base_opt)",
                        "optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))")
    code = textwrap.dedent(code.format(apply="base_opt")).lstrip("\n")
    found = Engine(MP1, Options(keras="2", unsafe_fixes=True, project_policy=False)).lint(code, Path("train.py")).findings
    assert found == []
