"""MP106 by Keras generation (wave 7, turn 11: strategy_optimizer_k2.py, a correct script it reported).

Ran, TF 2.21 CPU, MirroredStrategy over 2 logical CPUs, the LossScaleOptimizer built before
``strategy.scope()`` and the model inside it:
- Keras 3: the first ``apply_gradients`` in ``strategy.run`` raises ``RuntimeError: Mixing different
  tf.distribute.Strategy objects`` (the optimizer keeps the strategy it was built under);
- tf_keras (Keras 2), new and legacy SGD, custom loop and compile/fit: trains, loss falls, the slots are
  created as MirroredVariables at the first apply. Keras 2 is therefore not reported."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP1 = tuple(r for r in all_rules() if r.code.startswith("MP1"))

LOOP = """
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")


    def main():
        strategy = tf.distribute.MirroredStrategy()
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
        with strategy.scope():
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
                scaled = {scale}
            grads = {grads}
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        @tf.function
        def train_step(x, y):
            return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)
"""
K3 = dict(imports="import keras\nimport tensorflow as tf", scale="optimizer.scale_loss(loss)",
          grads="tape.gradient(scaled, model.trainable_variables)")
K2 = dict(imports='import os\nos.environ["TF_USE_LEGACY_KERAS"] = "1"\nimport tensorflow as tf\nimport tf_keras as keras',
          scale="optimizer.get_scaled_loss(loss)",
          grads="optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))")


def lint(parts: dict, keras: str):
    code = textwrap.dedent(LOOP).format(**parts).lstrip("\n")
    compile(code, "train.py", "exec")
    return Engine(MP1, Options(keras=keras, project_policy=False)).lint(code, Path("train.py")).findings


def test_keras3_lso_built_outside_the_scope_is_mp106():
    found = lint(K3, "3")
    assert [f.code for f in found] == ["MP106"]
    assert "LossScaleOptimizer" in found[0].message or "optimizer" in found[0].message.lower()


def test_keras2_lso_built_outside_the_scope_trains_and_is_not_reported():
    assert lint(K2, "2") == []


def test_keras3_lso_built_inside_the_scope_is_silent():
    code = textwrap.dedent(LOOP).format(**K3)
    code = code.replace("        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))\n", "")
    code = code.replace("dtype=\"float32\")])\n", "dtype=\"float32\")])\n"
                        "            optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))\n", 1)
    found = Engine(MP1, Options(keras="3", project_policy=False)).lint(code.lstrip("\n"), Path("train.py")).findings
    assert found == []
