"""Turn 13: op knowledge moved into the one table of ops, reproduced first as a failing test.

``tf.math.squared_difference(a, b)`` is ``(a - b)²``, a square: its float16 sum over a long axis overflows as a sum of
``tf.square`` does (TF 2.21 CPU, Keras 3.15.1: 2 x 2048 values 10 apart give ``[inf inf]`` in float16, 204800.0 in
float32). Before, the table did not list it, so MP203 saw an op that follows its input and missed the sum.
"""

from __future__ import annotations

from mpfix.codemods.facts import ops

from .mp2_lint import BOTH, IMPORTS, found


def test_squared_difference_is_a_square_in_the_table():
    assert ops.lookup("tensorflow.math.squared_difference").has(ops.Kind.SQUARE)
    assert ops.lookup("keras.ops.squared_difference") is not None
    # The bounded class mpfix repair's float32 islands end at (values in [-1, 1] whatever the input).
    assert ops.lookup("tensorflow.math.tanh").has(ops.Kind.BOUNDED)
    assert not ops.lookup("tensorflow.math.exp").has(ops.Kind.BOUNDED)


@BOTH
def test_a_float16_sum_of_squared_differences_is_mp203(keras):
    code = f"""
        import tensorflow as tf
        {IMPORTS[keras]}

        keras.mixed_precision.set_global_policy("mixed_float16")


        class Distance(keras.layers.Layer):
            def call(self, a, b):
                return tf.reduce_sum(tf.math.squared_difference(a, b), axis=-1)
        """
    assert ("MP203", 9) in found(code, keras)


@BOTH
def test_a_squared_difference_left_unsummed_is_not_reported(keras):
    code = f"""
        import tensorflow as tf
        {IMPORTS[keras]}

        keras.mixed_precision.set_global_policy("mixed_float16")


        class Distance(keras.layers.Layer):
            def call(self, a, b):
                return tf.math.squared_difference(a, b)
        """
    assert [f for f in found(code, keras) if f[0] == "MP203"] == []
