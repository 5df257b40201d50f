"""A switch between the two generations' loss-scaling APIs under a test no guard rule knows (turn 18).

``tests/verify/scripts/workers/sharded_spend.py`` picks the API by ``KERAS3 = keras.layers.Dense.__module__
.startswith("keras.")``: ``optimizer.scale_loss(loss) if KERAS3 else optimizer.get_scaled_loss(loss)``, and
``if MIXED and not KERAS3: grads = optimizer.get_unscaled_gradients(grads)``. MP303 took each branch for the other
generation's misuse and rewrote it: under Keras 2 the Keras 3 branch became ``get_scaled_loss`` (``mpfix repair
--workers 2`` kept that with the float32 head, a crash on Keras 3). The branches themselves show the switch: one
spells only the old API, the other only the new one, so each is right where it runs, and the name the switch
tests is a flag elsewhere too. The same calls without the switch are still findings with fixes (the controls).
"""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

HEADER = "import tensorflow as tf\n\nkeras = tf.keras\nKERAS3 = keras.layers.Dense.__module__.startswith('keras.')\n"
LOOP = """
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())


def step(model, x, y, MIXED=True):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        target = (optimizer.scale_loss(loss) if KERAS3 else optimizer.get_scaled_loss(loss)) if MIXED else loss
    grads = tape.gradient(target, model.trainable_variables)
    if MIXED and not KERAS3:
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""
STATEMENT = """
optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())


def keras3():
    return not hasattr(keras, "__internal__")


def step(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        if keras3():
            target = optimizer.scale_loss(loss)
        else:
            target = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(target, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""


def _mp3(code: str, keras: int):
    return [(f.code, f.line, f.fix is not None) for f in lint_snippet(code, ("MP3",), keras=keras).findings]


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize("code", [HEADER + LOOP, HEADER + STATEMENT], ids=["flag", "statement"])
def test_each_branch_of_a_switch_between_the_two_apis_is_left_alone(code: str, keras: int):
    assert _mp3(code, keras) == []


def test_the_same_calls_without_the_switch_are_findings_with_fixes():
    # Keras 3: the Keras 2 calls alone (the flag now tests nothing the branches switch on).
    keras2_only = (HEADER + LOOP).replace("optimizer.scale_loss(loss) if KERAS3 else ", "")
    assert any(code == "MP303" and fix for code, _, fix in _mp3(keras2_only, 3)), _mp3(keras2_only, 3)
    # Keras 2: the Keras 3 call alone.
    keras3_only = (HEADER + STATEMENT).replace("        if keras3():\n            target = optimizer.scale_loss(loss)\n"
                                               "        else:\n            target = optimizer.get_scaled_loss(loss)\n",
                                               "        target = optimizer.scale_loss(loss)\n")
    assert any(code == "MP303" and fix for code, _, fix in _mp3(keras3_only, 2)), _mp3(keras3_only, 2)
    # Both branches spelling the same (old) API: no switch, the Keras 3 misuse is reported.
    same = (HEADER + LOOP).replace("optimizer.scale_loss(loss) if KERAS3",
                                   "optimizer.get_scaled_loss(2 * loss) if KERAS3")
    assert any(code == "MP303" for code, _, _ in _mp3(same, 3)), _mp3(same, 3)


def test_a_setting_choosing_between_a_removed_api_and_its_replacement_is_no_switch():
    """tf-models' ncf_keras_main.py: ``--fp16_implementation graph_rewrite`` picks the TF1 graph rewrite, gone in
    TF 2, beside a LossScaleOptimizer: a setting may pick the removed API, so MP305 still reports it (hazard H35)."""
    code = HEADER + """

def build(flags, optimizer):
    if flags.fp16_implementation == "graph_rewrite":
        optimizer = tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite(optimizer)
    elif flags.dtype == "fp16":
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        scale = optimizer.loss_scale
    return optimizer
"""
    assert [code for code, _, _ in _mp3(code, 2) if code == "MP305"] == ["MP305"], _mp3(code, 2)
