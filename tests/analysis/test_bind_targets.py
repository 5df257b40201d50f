"""Every name a function binds is in its dtype tables, as in the binding model: ``with ... as`` names and
names inside nested tuple targets too (before, both were missing, so a read of such a name fell through to
a module constant of the same name).

A ``with`` name is what ``__enter__`` returned (a tape, a name scope: ``ENTERED``, no tensor); a name deep
in a tuple target is an ``ELEMENT`` nobody indexes (unknown).
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpfix.codemods.analysis.bindings import Bindings, BindingKind
from mpfix.codemods.analysis.dtype_regions import ELEMENT
from mpfix.codemods.analysis.dtype_tables import ENTERED, own
from mpfix.codemods.analysis.dtypes import DtypeAnalysis
from mpfix.codemods.analysis.gradient_syntax import _scopes
from mpfix.codemods.names import ImportTable
from mpfix.testing import lint_snippet

_IMPORT = {3: "import keras", 2: "import tf_keras as keras"}

LAYER = """
    import tensorflow as tf
    {import_keras}

    EPS = 1e-8


    class MultiScaleNorm(keras.layers.Layer):
        def __init__(self, scales, **kwargs):
            super().__init__(**kwargs)
            self.scales = scales

        def call(self, inputs):
            outputs = []
            for i, (EPS, scale) in enumerate(self.scales):
                outputs.append(inputs * scale / (tf.norm(inputs) + EPS))
            return tf.add_n(outputs)


    class ScopedNorm(keras.layers.Layer):
        def call(self, inputs):
            with tf.name_scope("norm") as EPS:
                return inputs / tf.norm(inputs)


    class Norm(keras.layers.Layer):
        def call(self, inputs):
            return inputs / (tf.norm(inputs) + EPS)
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_a_name_bound_in_a_nested_tuple_target_is_not_the_module_constant(keras):
    code = textwrap.dedent(LAYER.format(import_keras=_IMPORT[keras])).lstrip("\n")
    result = lint_snippet(code, "MP202", keras=keras, policy="mixed_float16", fix=False, filename="layers.py")
    lines = code.splitlines()
    flagged = [lines[f.line - 1].strip() for f in result.findings]
    # `EPS` of the loop is each scale's own epsilon (unknown), not the module's 1e-8: only Norm's is flagged.
    assert flagged == ["return inputs / (tf.norm(inputs) + EPS)"]


STEP = """
    import tensorflow as tf

    @tf.function
    def train_step(model, optimizer, batch):
        (images, labels), weights = batch
        with tf.GradientTape() as tape, tf.name_scope("loss") as scope:
            logits = model(images, training=True)
            loss = tf.reduce_mean(weights * tf.square(tf.cast(logits, tf.float32) - labels))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
"""


def test_the_tables_hold_every_name_the_scope_binds():
    module = cst.parse_module(textwrap.dedent(STEP).lstrip("\n"))
    analysis = DtypeAnalysis(module, ImportTable(module).resolve, None, keras=3)
    func = next(s for s in module.body if isinstance(s, cst.FunctionDef))
    region = analysis.region_for(func)
    table = own(region.assigned)
    assert table["tape"] == [ENTERED] and table["scope"] == [ENTERED]
    assert table["images"] == [ELEMENT] and table["labels"] == [ELEMENT]  # inside `(images, labels), weights`
    assert "images" not in region.unpacked and [i for _, i in region.unpacked["weights"]] == [1]
    scope = next(s for s in _scopes(module) if s.node is func)
    bound = {n for n, bs in Bindings(_scopes(module)).of(scope).names.items()
             if "." not in n and any(b.kind is not BindingKind.PARAMETER for b in bs)}
    assert set(table) == bound
