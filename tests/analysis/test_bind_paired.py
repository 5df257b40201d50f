"""``a, b = x, y`` binds a to x (``bindings.decompose`` pairs a literal tuple's elements with the targets), so the
dtype tables hold the element itself, as the binding model does: ``values_of`` and constant folding read it
(before, the table said "element 0 of the tuple", and the float16 overflow/underflow constants bound that way
were missed: MP201/MP202 on ``big, eps = 1e9, 1e-9``). A starred target or a ``for`` target is never paired.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpfix.codemods.analysis.bindings import BindingKind, decompose
from mpfix.codemods.analysis.dtype_lattice import Dtype
from mpfix.codemods.facts.dtype_facts import facts_for
from mpfix.testing import lint_snippet

_IMPORT = {3: "import keras", 2: "import tf_keras as keras"}

LAYER = """
    import tensorflow as tf
    {import_keras}


    class MaskedSoftmax(keras.layers.Layer):
        def call(self, logits, mask):
            big, eps = 1e9, 1e-9
            logits = logits - big * (1.0 - tf.cast(mask, logits.dtype))
            return tf.nn.softmax(logits) / (tf.reduce_sum(tf.cast(mask, logits.dtype)) + eps)
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_constants_bound_by_a_paired_unpacking_are_folded(keras):
    code = LAYER.format(import_keras=_IMPORT[keras])
    result = lint_snippet(code, ("MP201", "MP202"), keras=keras, policy="mixed_float16", fix=False, filename="layers.py")
    assert sorted((f.code, f.line) for f in result.findings) == [("MP201", 8), ("MP202", 9)]
    fixed = lint_snippet(code, ("MP201", "MP202"), keras=keras, policy="mixed_float16", fix=True, filename="layers.py")
    compile(fixed.fixed_text, "layers.py", "exec")  # the fix edits the tuple's element and still parses
    assert "1e9" not in fixed.fixed_text.split("class MaskedSoftmax")[1].split("logits = ")[0]


@pytest.mark.parametrize("statement, paired", [
    ("a, b = x, y", {"a": "x", "b": "y"}),
    ("a, *b = x, y, z", {}),             # b is a list of the rest: nothing is paired by position
    ("*a, b = x, y, z", {}),
    ("a, b = *xs, y", {}),
    ("(a, b), c = (x, y), z", {"a": "x", "b": "y", "c": "z"}),
])
def test_decompose_pairs_only_by_position(statement, paired):
    assign = cst.parse_statement(statement).body[0]
    found = decompose(assign.targets[0].target, assign.value, assign, (), BindingKind.ASSIGN)
    module = cst.Module([])
    assert {b.name: module.code_for_node(b.value) for b in found if b.element is None} == paired


def test_a_for_target_is_not_paired_with_a_literal_tuple():
    loop = cst.parse_statement("for a, b in (x, y):\n    pass\n")
    found = decompose(loop.target, loop.iter, loop, (), BindingKind.FOR)
    assert [(b.name, b.element) for b in found] == [("a", 0), ("b", 1)]


CELL = """
    import tensorflow as tf
    {import_keras}


    class ConvCell(keras.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(3, 3, input_shape[-1], 4 * 8), name="kernel")
            self.bias = self.add_weight(shape=(4 * 8,), name="bias")

        def call(self, inputs):
            kernel_i, kernel_f = tf.split(self.kernel, 2, axis=3)
            if self.use_bias:
                bias_i, bias_f = tf.split(self.bias, 2)
            else:
                bias_i, bias_f = None, None
            return self.input_conv(inputs, kernel_i, bias_i) * self.input_conv(inputs, kernel_f, bias_f)

        def input_conv(self, x, w, b=None):
            conv_out = tf.nn.conv2d(x, w, 1, "SAME")
            if b is not None:
                bias = tf.reshape(b, (1, 1, 1, -1))
                conv_out += bias
            return conv_out
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_a_name_paired_with_none_in_one_branch_is_not_what_every_call_passes(keras):
    # `bias_i, bias_f = None, None` is the other branch: at the call `bias_i` is the variable's split (float16 inside
    # `call`) or None, not None alone (keras conv_lstm.py: `b` taken as a Python number made `bias` float32 and an
    # MP206 "`bias` is float32" when the tables first held the paired element; `dtype_at` reads plain assignments).
    module = cst.parse_module(textwrap.dedent(CELL.format(import_keras=_IMPORT[keras])).lstrip("\n"))
    analysis = facts_for(module, keras)._a
    helper = next(r for r in analysis.regions if r.name == "input_conv")
    assert helper.env["b"] is not Dtype.PYTHON and helper.env["bias"] is not Dtype.FLOAT32
