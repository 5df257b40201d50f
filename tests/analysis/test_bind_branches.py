"""A name read after an ``if``/``else`` whose two branches both bind it holds one of those two bindings (the binding
model's ``Binding.branch``: (the ``if``, which branch)): the bindings before the ``if`` cannot reach the read. Where
the two branches agree, the read has their dtype; where they disagree (float16 on one, float32 on the other), it is
unknown, and unknown never flags. Before, the flow read both branches as "may have run" and went on to the float32
binding before the ``if``: float16 and float32, so unknown even where both branches said float16.
"""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

_IMPORT = {3: "import keras", 2: "import tf_keras as keras"}

GATE = """
    import tensorflow as tf
    {import_keras}


    class ScaledGate(keras.layers.Layer):
        def call(self, inputs, training=None):
            h = tf.math.l2_normalize(tf.cast(inputs, tf.float32), axis=-1)
            if training:
                h = tf.cast(tf.nn.dropout(h, rate=0.1), {train})
            else:
                h = tf.cast(h, {infer})
            return tf.math.log(tf.nn.sigmoid(h) + 1e-8)
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_both_branches_binding_float16_kill_the_float32_before_them(keras):
    code = GATE.format(import_keras=_IMPORT[keras], train="self.compute_dtype", infer="self.compute_dtype")
    result = lint_snippet(code, ("MP202",), keras=keras, policy="mixed_float16", fix=False, filename="layers.py")
    assert [(f.code, f.line) for f in result.findings] == [("MP202", 12)]


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize("train, infer", [("self.compute_dtype", "tf.float32"), ("tf.float32", "self.compute_dtype")])
def test_branches_that_disagree_are_unknown_and_never_flag(keras, train, infer):
    code = GATE.format(import_keras=_IMPORT[keras], train=train, infer=infer)
    result = lint_snippet(code, ("MP202",), keras=keras, policy="mixed_float16", fix=False, filename="layers.py")
    assert result.findings == []


ONE_BRANCH = """
    import tensorflow as tf
    {import_keras}


    class ScaledGate(keras.layers.Layer):
        def call(self, inputs, training=None):
            h = tf.math.l2_normalize(tf.cast(inputs, tf.float32), axis=-1)
            if training:
                h = tf.cast(tf.nn.dropout(h, rate=0.1), self.compute_dtype)
            elif self.trainable:
                h = tf.cast(h, self.compute_dtype)
            return tf.math.log(tf.nn.sigmoid(h) + 1e-8)
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_an_if_without_else_leaves_the_binding_before_it(keras):
    # No `else`: the float32 `h` reaches the read when neither branch runs; float16 or float32, unknown.
    code = ONE_BRANCH.format(import_keras=_IMPORT[keras])
    result = lint_snippet(code, ("MP202",), keras=keras, policy="mixed_float16", fix=False, filename="layers.py")
    assert result.findings == []
