"""MP206: under Keras 3 a variable made by ``add_weight`` is a Keras variable, and Python operators on it are
``keras.ops`` (which promote float16 with float32 to float32) whenever the variable's own operator runs: the
variable on the left, or on the right of ``*``, ``-``, ``/`` (TensorFlow's own operator gives way to the
variable's reflected one when the dtypes differ). Measured with TF 2.21 / keras 3.15 on a float16 input and an
``add_weight(dtype="float32", autocast=False)`` gain: ``x * g``, ``x - g``, ``x / g``, ``g * x``, ``g + x`` give
float32; ``x + g`` and ``x += g`` raise in eager mode, ``tf.multiply(x, g)`` always raises; tf_keras
(``experimental_autocast=False``) raises for all of them. Wave 5 of the held-out scripts: scalenorm_k3_ok.py
(``x / norm * self.gain``) was an MP206 false positive."""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

LAYER = """
    import tensorflow as tf
    {import_keras}

    keras.mixed_precision.set_global_policy("mixed_float16")


    class ScaleNorm(keras.layers.Layer):
        def build(self, input_shape):
            self.gain = self.add_weight(shape=(), initializer="ones", dtype="float32", {flag}=False, name="gain")

        def call(self, x):
            norm = tf.sqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) + 1e-3)
            return {expr}
"""

_K3 = dict(import_keras="import keras", flag="autocast")
_K2 = dict(import_keras="import tf_keras as keras", flag="experimental_autocast")


def mp206(code: str, keras: int) -> list[int]:
    return [f.line for f in lint_snippet(code, "MP206", keras=keras, policy=None, filename="layer.py").findings]


@pytest.mark.parametrize("expr", ["x / norm * self.gain", "x - self.gain", "x / self.gain", "self.gain * x",
                                  "self.gain + x"])
def test_keras3_variable_operators_promote(expr):
    assert mp206(LAYER.format(expr=expr, **_K3), 3) == []


@pytest.mark.parametrize("expr", ["x + self.gain", "tf.multiply(x, self.gain)"])
def test_keras3_tensor_operators_still_raise(expr):
    assert mp206(LAYER.format(expr=expr, **_K3), 3) == [13]


@pytest.mark.parametrize("expr", ["x / norm * self.gain", "self.gain * x"])
def test_tf_keras_variables_do_not_promote(expr):
    assert mp206(LAYER.format(expr=expr, **_K2), 2) == [13]
