"""MP203's attention scores scaled only after the product, with the key transposed by an op
(``matmul(q, transpose(k, (0, 1, 3, 2))) / sqrt(d)``) rather than ``transpose_b=True``: the same
head_dim products summed in float16 before the scaling (issue 18's list; seen on the held-out scripts)."""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

ATTENTION = """
    import math

    import keras
    from keras import layers, ops

    keras.mixed_precision.set_global_policy("mixed_float16")


    class Attention(layers.Layer):
        def __init__(self, dim, heads, **kwargs):
            super().__init__(**kwargs)
            self.heads, self.head_dim = heads, dim // heads
            self.qkv = layers.Dense(3 * dim)

        def call(self, x):
            b = ops.shape(x)[0]
            qkv = ops.transpose(ops.reshape(self.qkv(x), (b, -1, 3, self.heads, self.head_dim)), (2, 0, 3, 1, 4))
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = ops.matmul(q, {key}) / math.sqrt(64)
            return ops.matmul(ops.softmax(scores), v)
"""


def found(code: str):
    result = lint_snippet(code, "MP203", keras=3, policy=None, fix=False, filename="model.py")
    fixed = lint_snippet(code, "MP203", keras=3, policy=None, fix=True, filename="model.py")
    return [(f.code, f.line) for f in result.findings], fixed


@pytest.mark.parametrize("key", ["ops.transpose(k, (0, 1, 3, 2))", "ops.transpose(k, axes=[0, 1, 3, 2])"])
def test_keys_transposed_by_an_op_are_attention_scores(key):
    codes, result = found(ATTENTION.format(key=key))
    assert codes == [("MP203", 19)]
    assert "ops.matmul(q / math.sqrt(64), " in result.fixed_text  # the queries are scaled before the product


@pytest.mark.parametrize("key", ["ops.transpose(q, (0, 1, 3, 2))", "ops.transpose(k, (0, 2, 1, 3))", "k"])
def test_self_similarity_and_other_permutations_are_not_attention_scores(key):
    assert found(ATTENTION.format(key=key))[0] == []
