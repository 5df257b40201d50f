"""Wave 14 of ``benchmarks/unseen`` (turn 18, scored untuned: bugs 5/6, findings right 10/14): glow_flow_k3.py's
affine coupling writes ``log_s, t = ops.split(h, 2); log_s = ops.tanh(log_s)`` and then ``ops.exp(log_s)``; MP204
reported the exp as a float16 overflow. The facts missing: an op the table marks BOUNDED (tanh, sin, cos, erf) is
at most 1 whatever its input, so exp of it is at most e (the range analysis knew only clips, minimum and
probabilities); and the value of a name at the exp is the binding that reaches it (the tanh), not the earlier
unpacking of the split.
"""

from __future__ import annotations

import textwrap

from mpfix.testing import lint_snippet


def codes(code: str, keras: str) -> list[tuple[str, int]]:
    compile(textwrap.dedent(code).lstrip("\n"), "train.py", "exec")
    result = lint_snippet(code, ("MP2",), keras=keras, filename="train.py")
    return sorted((f.code, f.line) for f in result.findings if f.code == "MP204")


K3_COUPLING = """
    import keras
    from keras import ops

    keras.mixed_precision.set_global_policy("mixed_float16")


    class AffineCoupling(keras.layers.Layer):
        def __init__(self, dim, **kwargs):
            super().__init__(**kwargs)
            self.half = dim // 2
            self.net = keras.layers.Dense(2 * (dim - self.half))

        def call(self, x):
            xa, xb = x[:, :self.half], x[:, self.half:]
            log_s, t = ops.split(self.net(xa), 2, axis=-1)
            log_s = {squash}
            return ops.concatenate([xa, xb * ops.exp(log_s) + t], axis=-1), ops.sum(log_s, axis=-1)
"""

K2_COUPLING = """
    import os

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras as keras

    keras.mixed_precision.set_global_policy("mixed_float16")


    class AffineCoupling(keras.layers.Layer):
        def __init__(self, dim, **kwargs):
            super().__init__(**kwargs)
            self.half = dim // 2
            self.scale = keras.layers.Dense(dim - self.half)
            self.shift = keras.layers.Dense(dim - self.half)

        def call(self, x):
            xa, xb = x[:, :self.half], x[:, self.half:]
            log_s = {squash}
            return tf.concat([xa, xb * tf.exp(log_s) + self.shift(xa)], axis=-1), tf.reduce_sum(log_s, axis=-1)
"""


def test_keras3_exp_of_tanh_after_unpacking_is_bounded():
    assert codes(K3_COUPLING.format(squash="ops.tanh(log_s)"), "3") == []
    # the control: an unbounded log-scale still overflows float16 past 11.1
    assert codes(K3_COUPLING.format(squash="log_s * 2.0"), "3") == [("MP204", 17)]


def test_tf_keras_exp_of_tanh_is_bounded():
    assert codes(K2_COUPLING.format(squash="tf.tanh(self.scale(xa))"), "2") == []
    assert codes(K2_COUPLING.format(squash="self.scale(xa)"), "2") == [("MP204", 20)]
