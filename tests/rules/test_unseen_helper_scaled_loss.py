"""A scaled loss returned by a same-file helper (``def objective(x, y): ...; return loss,
optimizer.scale_loss(loss)``, unpacked in the tape as ``loss, scaled = objective(x, y)``): the gradient
of ``scaled`` carries the loss scale. Found probing wave 6's shapes (turn 10): MP102 called it unscaled
and its fix scaled it a second time (``scaled_scaled = optimizer.scale_loss(scaled)``: updates x32768).
The helper's optimizer is read as the caller names it (a parameter maps to the call's argument)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP1 = tuple(r for r in all_rules() if r.code.startswith("MP1"))

HELPER = """
    import tensorflow as tf
    {import_keras}

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64), keras.layers.Dense(1, dtype="float32")])
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))


    def objective(opt, x, y):
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        {ret}


    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            {unpack} = objective(optimizer, x, y)
        grads = tape.gradient(scaled, model.trainable_variables){unscale}
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""
_KERAS = {3: ("import keras", "scale_loss"), 2: ("import tf_keras as keras", "get_scaled_loss")}
K2_UNSCALE = "\n        grads = optimizer.get_unscaled_gradients(grads)"


def snippet(keras: int, *, pair: bool = True, named: bool = False, unscale: bool = False) -> str:
    import_keras, method = _KERAS[keras]
    if named:
        ret = f"scaled_loss = opt.{method}(loss)\n        return loss, scaled_loss"
    else:
        ret = f"return loss, opt.{method}(loss)" if pair else f"return opt.{method}(loss)"
    code = HELPER.format(import_keras=import_keras, ret=ret, unpack="loss, scaled" if pair else "scaled",
                         unscale=K2_UNSCALE if unscale else "")
    code = textwrap.dedent(code).lstrip("\n")
    compile(code, "train.py", "exec")
    return code


def lint(code: str, keras: int):
    engine = Engine(MP1, Options(keras=str(keras), unsafe_fixes=True, project_policy=False))
    return engine.lint(code, Path("train.py"))


@pytest.mark.parametrize("pair,named", [(True, False), (False, False), (True, True)])
def test_keras3_scaled_loss_returned_by_a_helper_is_scaled(pair, named):
    assert lint(snippet(3, pair=pair, named=named), 3).findings == []


def test_keras2_helper_scaled_loss_unscaled_before_apply_is_right():
    assert lint(snippet(2, unscale=True), 2).findings == []


def test_keras2_helper_scaled_loss_applied_without_unscaling_is_mp103():
    found = lint(snippet(2), 2).findings
    assert [(f.code, f.line) for f in found] == [("MP103", 19)]


def test_a_helper_scaling_with_another_optimizer_than_the_update_is_not_taken_for_this_one():
    code = snippet(3).replace("objective(optimizer, x, y)", "objective(other_optimizer, x, y)")
    # whatever is reported, no fix scales `scaled` a second time
    fixed = Engine(MP1, Options(keras="3", unsafe_fixes=True, project_policy=False)).lint(
        code, Path("train.py"), fix=True).fixed_text or code
    assert "optimizer.scale_loss(scaled)" not in fixed
