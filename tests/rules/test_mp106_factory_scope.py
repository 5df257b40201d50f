"""MP106 through a same-file factory (9279193), and the false positive measure's probe found in it: a factory
that builds its optimizer under its own ``with X.scope():`` builds it in that scope (ran, TF 2.21 Keras 3,
MirroredStrategy over 2 logical CPUs: trains), wherever the factory is called."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP106 = tuple(r for r in all_rules() if r.code == "MP106")

SCRIPT = """
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


    {factory}


    optimizer = build_optimizer({args})
    with strategy.scope():
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(4, dtype="float32")])
        optimizer.build(model.trainable_variables)
"""

IN_ITS_OWN_SCOPE = """
def build_optimizer(lr):
    with strategy.scope():
        return keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(lr))
"""
IN_A_SCOPE_IT_IS_HANDED = """
def build_optimizer(strat, lr):
    with strat.scope():
        opt = keras.optimizers.Adam(lr)
        opt = keras.optimizers.LossScaleOptimizer(opt)
    return opt
"""
NO_SCOPE = """
def build_optimizer(lr):
    opt = keras.optimizers.Adam(lr)
    opt = keras.optimizers.LossScaleOptimizer(opt)
    return opt
"""


def _mp106(factory: str, args: str) -> list[int]:
    code = textwrap.dedent(SCRIPT).format(factory=factory.strip(), args=args).lstrip("\n")
    compile(code, "train.py", "exec")
    found = Engine(MP106, Options(keras="3", project_policy=False)).lint(code, Path("train.py")).findings
    return [f.line for f in found]


def test_a_factory_that_builds_under_its_own_scope_is_not_reported_where_it_is_called():
    assert _mp106(IN_ITS_OWN_SCOPE, "1e-3") == []
    assert _mp106(IN_A_SCOPE_IT_IS_HANDED, "strategy, 1e-3") == []


def test_a_factory_that_builds_outside_any_scope_is_still_reported_at_its_call():
    # Ran: RuntimeError 'Mixing different tf.distribute.Strategy objects' (measure's c_factory_name_bug_k3).
    assert _mp106(NO_SCOPE, "1e-3") == [14]  # `optimizer = build_optimizer(1e-3)`
