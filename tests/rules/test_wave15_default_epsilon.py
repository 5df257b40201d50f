"""Wave 15 of ``benchmarks/unseen`` (turn 19, scored untuned): sisdr_separation_k2.py's negative SI-SDR loss, given
to tf_keras ``compile`` on a float16 head, is ``def neg_si_sdr(y_true, y_pred, eps=1e-8)`` with ``energy + eps``
and ``log(ratio + eps)`` in its body; MP202 did not see the epsilon (silent targets gave 0/0 = NaN at every step).
The fact missing: a parameter no call in the file passes is its default wherever the function runs (Keras calls a
loss with two arguments), so a literal default is the constant the name stands for, as a constructor default
already was for ``self.eps``.
"""

from __future__ import annotations

import textwrap

from mpfix.testing import fixed, lint_snippet


def lines(code: str, keras: str) -> list[int]:
    compile(textwrap.dedent(code).lstrip("\n"), "train.py", "exec")
    result = lint_snippet(code, ("MP202",), keras=keras, filename="train.py")
    return sorted(f.line for f in result.findings if f.code == "MP202")


K2_LOSS = """
    import os

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras as keras

    keras.mixed_precision.set_global_policy("mixed_float16")


    def neg_si_sdr(y_true, y_pred, eps={eps}):
        y_true = tf.cast(y_true, y_pred.dtype)
        dot = tf.reduce_sum(y_true * y_pred, axis=-1, keepdims=True)
        energy = tf.reduce_sum(tf.square(y_true), axis=-1, keepdims=True)
        target = dot / (energy + eps) * y_true
        noise = y_pred - target
        ratio = tf.reduce_sum(tf.square(target), axis=-1) / (tf.reduce_sum(tf.square(noise), axis=-1) + eps)
        return -10.0 * tf.math.log(ratio + eps)


    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64)])
    model.compile("adam", loss=neg_si_sdr)
{extra}"""


def test_default_epsilon_of_a_compiled_tf_keras_loss_is_reported_where_it_meets_float16():
    assert lines(K2_LOSS.format(eps="1e-8", extra=""), "2") == [14, 16, 17]


def test_default_epsilon_is_reported_without_a_fix():
    # eps=1e-4 removed the NaN of the SI-SDR script but it did not train (loss flat at 37.3 for 6 epochs: the
    # gradient of log(ratio + 1e-4) under the loss scale); the float32 head did (48.7 -> 23.3).
    code = K2_LOSS.format(eps="1e-8", extra="")
    assert fixed(code, ("MP202",), keras="2", filename="train.py") == textwrap.dedent(code).lstrip("\n")
    messages = {f.message for f in lint_snippet(code, ("MP202",), keras="2", filename="train.py").findings}
    assert messages and all("`eps` defaults to 1e-8" in m for m in messages)
    inline = code.replace("eps=1e-8):", "eps=None):").replace("(energy + eps)", "(energy + 1e-8)")
    assert "(energy + 1e-4)" in fixed(inline, ("MP202",), keras="2", filename="train.py")  # a literal keeps its fix


def test_a_float16_safe_default_is_not_reported():
    assert lines(K2_LOSS.format(eps="1e-4", extra=""), "2") == []


def test_a_default_every_caller_may_override_is_not_the_constant():
    # A call in the file passes eps: the default is not what the function always runs with.
    extra = "\n\n    def evaluate(y, p):\n        return neg_si_sdr(y, p, eps=1e-3)\n"
    assert lines(K2_LOSS.format(eps="1e-8", extra=extra), "2") == []
    positional = "\n\n    def evaluate(y, p):\n        return neg_si_sdr(y, p, 1e-3)\n"
    assert lines(K2_LOSS.format(eps="1e-8", extra=positional), "2") == []


def test_a_call_without_the_argument_keeps_the_default():
    extra = "\n\n    def evaluate(y, p):\n        return neg_si_sdr(y, p)\n"
    assert lines(K2_LOSS.format(eps="1e-8", extra=extra), "2") == [14, 16, 17]


def test_keras3_compiled_loss_gets_float32_predictions():
    code = K2_LOSS.replace('    os.environ["TF_USE_LEGACY_KERAS"] = "1"\n', "").replace("import tf_keras as keras", "import keras")
    assert lines(code.format(eps="1e-8", extra=""), "3") == []


def test_default_epsilon_of_a_helper_called_from_a_layer():
    code = """
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")


        def unit(v, eps=1e-9):
            return v / (tf.norm(v, axis=-1, keepdims=True) + eps)


        class Head(keras.layers.Layer):
            def call(self, x):
                return unit(x)
    """
    assert lines(code, "3") == [8]
