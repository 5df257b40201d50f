"""Dtype classes found missing on the held-out scripts of ``benchmarks/unseen`` (issue 18), each as a
realistic snippet of the class (not the benchmark file).

Comprehension targets and unpacking: ``q, k, v = [t for t in tf.split(qkv, 3, axis=-1)]`` binds
float16 tensors: an element of a comprehension is its ``elt``, and a comprehension's target iterating
an op whose elements the op table knows (``split``, ``unstack``) has the op's input dtype.
"""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

BOTH = pytest.mark.parametrize("keras", [2, 3])
_IMPORT = {3: "import keras", 2: "import tf_keras as keras"}


def found(code: str, keras: int = 3, policy: str | None = "mixed_float16") -> list[tuple[str, int]]:
    result = lint_snippet(code, "MP2", keras=keras, policy=policy, fix=False, filename="model.py")
    return sorted((f.code, f.line) for f in result.findings)


ATTENTION = """
    {import_keras}
    import tensorflow as tf


    class GatedAttention(keras.layers.Layer):
        def __init__(self, dim, **kwargs):
            super().__init__(**kwargs)
            self.proj = keras.layers.Dense(3 * dim)
            self.dim = dim

        def call(self, x, mask):
            {unpack}
            logits = tf.matmul(q, k, transpose_b=True) / (self.dim ** 0.5)
            logits += (1.0 - tf.cast(mask[:, None, :], logits.dtype)) * -1e9
            out = tf.matmul(tf.nn.softmax(logits), v)
            self.add_loss(1e-4 * tf.reduce_sum(out ** 2))
            return out
"""


def _attention(keras: int, unpack: str) -> str:
    return ATTENTION.format(import_keras=_IMPORT[keras], unpack=unpack)


@BOTH
@pytest.mark.parametrize("unpack", [
    "q, k, v = [t for t in tf.split(self.proj(x), 3, axis=-1)]",
    "q, k, v = [tf.squeeze(t, axis=-2) for t in tf.split(tf.expand_dims(self.proj(x), -2), 3, axis=-1)]",
    "q, k, v = (t for t in tf.unstack(tf.reshape(self.proj(x), (-1, 16, 3, self.dim)), axis=2))",
    "q, k, v = [self.proj(x)[..., i * self.dim:(i + 1) * self.dim] for i in range(3)]",
])
def test_comprehension_unpacked_attention_inputs_are_float16(keras, unpack):
    assert found(_attention(keras, unpack), keras) == [("MP201", 14), ("MP203", 16)]


def test_a_comprehension_that_casts_its_elements_to_float32_is_left_alone():
    unpack = "q, k, v = [tf.cast(t, tf.float32) for t in tf.split(self.proj(x), 3, axis=-1)]"
    # float32 logits: -1e9 is safe, the sum of squares is float32.
    assert found(_attention(3, unpack), 3) == []


MAPPED = """
    {import_keras}
    import tensorflow as tf


    class SplitHeadAttention(keras.layers.Layer):
        def __init__(self, dim, heads, **kwargs):
            super().__init__(**kwargs)
            self.heads, self.dim = heads, dim
            self.wq, self.wk, self.wv = keras.layers.Dense(dim), keras.layers.Dense(dim), keras.layers.Dense(dim)

        def split_heads(self, t):
            batch = tf.shape(t)[0]
            t = tf.reshape(t, (batch, -1, self.heads, self.dim // self.heads))
            return tf.transpose(t, (0, 2, 1, 3))

        def call(self, x, mask):
            q, k, v = {mapped}
            scores = tf.einsum("bhqd,bhkd->bhqk", q, k)
            scores = tf.where(mask[:, None, None, :], scores, -1e9)
            return tf.einsum("bhqk,bhkd->bhqd", tf.nn.softmax(scores), v)
"""


@BOTH
@pytest.mark.parametrize("mapped", [
    "map(self.split_heads, (self.wq(x), self.wk(x), self.wv(x)))",
    "map(tf.squeeze, tf.split(tf.stack([self.wq(x), self.wk(x), self.wv(x)]), 3))",
])
def test_map_of_a_dtype_keeping_function_over_float16_values_unpacks_float16(keras, mapped):
    assert found(MAPPED.format(import_keras=_IMPORT[keras], mapped=mapped), keras) == [("MP201", 19)]


def test_map_of_a_function_that_casts_to_float32_is_left_alone():
    code = MAPPED.format(import_keras=_IMPORT[3], mapped="map(self.split_heads, (self.wq(x), self.wk(x), self.wv(x)))")
    code = code.replace("return tf.transpose(t, (0, 2, 1, 3))", "return tf.cast(tf.transpose(t, (0, 2, 1, 3)), tf.float32)")
    assert found(code, 3) == []
