"""Gradients a same-file helper takes and returns (``loss, grads = compute_gradients(x, y)``), transformed
and applied by the caller: the path follows the helper's return value, so what the caller does to the
gradients is judged by the state they are returned in. Found probing wave 6's shapes (turn 10): a Keras 3
clip in the caller of gradients the helper took of ``scale_loss`` was not reported (the LossScaleOptimizer
unscales only in ``apply_gradients``, so the clip sees gradients x32768)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP1 = tuple(r for r in all_rules() if r.code.startswith("MP1"))

STEP = """
    import tensorflow as tf
    {import_keras}

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64), keras.layers.Dense(1, dtype="float32")])
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))


    def compute_gradients(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            scaled = optimizer.{scale}(loss)
        grads = tape.gradient(scaled, model.trainable_variables){unscale}
        return loss, grads


    @tf.function
    def train_step(x, y):
        loss, grads = compute_gradients(x, y)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
"""
_KERAS = {3: ("import keras", "scale_loss"), 2: ("import tf_keras as keras", "get_scaled_loss")}


def snippet(keras: int, unscale: bool = False) -> str:
    import_keras, scale = _KERAS[keras]
    code = STEP.format(import_keras=import_keras, scale=scale,
                       unscale="\n        grads = optimizer.get_unscaled_gradients(grads)" if unscale else "")
    code = textwrap.dedent(code).lstrip("\n")
    compile(code, "train.py", "exec")
    return code


def lint(code: str, keras: int):
    return Engine(MP1, Options(keras=str(keras), unsafe_fixes=True, project_policy=False)).lint(code, Path("train.py"))


def test_keras3_clip_in_the_caller_of_returned_scaled_gradients_is_mp109():
    code = snippet(3)
    found = lint(code, 3).findings
    clip = next(i for i, l in enumerate(code.splitlines(), 1) if "clip_by_global_norm" in l)
    assert [(f.code, f.line) for f in found] == [("MP109", clip)]


def test_keras2_returned_gradients_unscaled_by_the_helper_then_clipped_are_right():
    assert lint(snippet(2, unscale=True), 2).findings == []


def test_keras2_returned_scaled_gradients_clipped_and_applied_without_unscale_are_reported():
    codes = {f.code for f in lint(snippet(2), 2).findings}
    assert codes & {"MP103", "MP109"}


def test_returned_unscaled_gradients_of_a_bare_optimizer_are_mp101_without_a_fix():
    code = snippet(3).replace("keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))",
                              "keras.optimizers.SGD(0.01)")
    code = code.replace("        scaled = optimizer.scale_loss(loss)\n", "").replace("tape.gradient(scaled", "tape.gradient(loss")
    found = lint(code, 3).findings
    assert [f.code for f in found] == ["MP101"]
    assert found[0].fix is None and "`compute_gradients`" in found[0].message
