"""A same-file optimizer factory that wraps its optimizer before returning it (wave 7, turn 11: the shape of
factory_optimizer_k3.py). ``opt = SGD(...); opt = LossScaleOptimizer(opt); return opt`` returns the LSO: the
factory's result is the returned name's last binding, not its first. Before, mpfix took the first (SGD), said
the optimizer "has no loss scaling" and its unsafe fix wrapped the SGD again inside the factory
(LSO(LSO(SGD)): the gradients are then unscaled twice). When the wrap is conditional (``if mixed: opt =
LossScaleOptimizer(opt)``) the factory may return either: mpfix cannot tell, and says so without a fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP1 = tuple(r for r in all_rules() if r.code.startswith("MP1"))

LOOP = """
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")


    def make_optimizer(lr, mixed=True):
        opt = keras.optimizers.SGD(lr, momentum=0.9)
    {wrap}
        return opt


    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, dtype="float32")])
    optimizer = make_optimizer(0.05)


    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
"""
IMPORTS = {3: "import keras\nimport tensorflow as tf", 2: "import tensorflow as tf\nimport tf_keras as keras"}
WRAP = "    opt = keras.mixed_precision.LossScaleOptimizer(opt)"
CONDITIONAL = "    if mixed:\n        opt = keras.mixed_precision.LossScaleOptimizer(opt)"


def lint(keras: int, wrap: str, fix: bool = False):
    code = textwrap.dedent(LOOP).format(imports=IMPORTS[keras], wrap=wrap).lstrip("\n")
    compile(code, "train.py", "exec")
    return Engine(MP1, Options(keras=str(keras), unsafe_fixes=True, project_policy=False)).lint(
        code, Path("train.py"), fix=fix)


@pytest.mark.parametrize("keras", [2, 3])
def test_a_factory_that_wraps_before_returning_returns_the_lso(keras: int):
    found = lint(keras, WRAP).findings
    assert [f.code for f in found] == ["MP102"], [(f.code, f.message) for f in found]
    assert "has no loss scaling" not in found[0].message
    fixed = lint(keras, WRAP, fix=True).fixed_text
    assert fixed is not None and fixed.count("LossScaleOptimizer(") == 1  # never wrapped twice


@pytest.mark.parametrize("keras", [2, 3])
def test_a_factory_that_wraps_conditionally_is_reported_without_a_fix(keras: int):
    found = lint(keras, CONDITIONAL).findings
    assert [f.code for f in found] == ["MP101"]
    assert found[0].fix is None
    assert "has no loss scaling" not in found[0].message


@pytest.mark.parametrize("keras", [2, 3])
def test_a_factory_that_does_not_wrap_is_still_unwrapped(keras: int):
    found = lint(keras, "").findings
    assert [f.code for f in found] == ["MP101"]
    assert "has no loss scaling" in found[0].message


# measure's probe of dbf1a54 (turn 11): a return before the wrap makes the factory's result path-dependent too. The
# get_scaled_loss fix raised AttributeError ('SGD' has no get_scaled_loss) on tf_keras's float32 path.
EARLY_RETURN = "    if not mixed:\n        return opt\n" + WRAP


@pytest.mark.parametrize("keras", [2, 3])
def test_a_factory_that_returns_before_wrapping_is_reported_without_a_fix(keras: int):
    found = lint(keras, EARLY_RETURN).findings
    assert [f.code for f in found] == ["MP101"]
    assert found[0].fix is None
    assert "has no loss scaling" not in found[0].message
