"""``ones_like(x)`` is ones whatever the sign of ``x``. The op table gave it the sign of its input (``Range.FOLLOWS``,
as ``zeros_like``, whose zeros have every sign), so the range analysis claimed ``ones_like(-relu(x)) <= 0`` and MP204
passed ``exp(ones * 20.0)``: e^20 is inf in float16 (found by fp14 in turn 19). Now it lies in [0, 1] (``UNIT``)."""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

GATE = """
import tensorflow as tf
from tensorflow import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class Gate(keras.layers.Layer):
    def call(self, x):
        ones = tf.{like}(-tf.nn.relu(x))
        return x * tf.exp(ones * {scale})
"""


def mp204_lines(like: str, scale: str) -> list[int]:
    code = GATE.format(like=like, scale=scale)
    compile(code, "gate.py", "exec")
    return [f.line for f in lint_snippet(code, ("MP204",), filename="gate.py").findings]


def test_exp_of_ones_like_of_a_negative_value_times_twenty_overflows():
    assert mp204_lines("ones_like", "20.0") == [10]


@pytest.mark.parametrize(("like", "scale"), [("ones_like", "-20.0"), ("zeros_like", "20.0"), ("ones_like", "2.0")])
def test_what_stays_in_range_is_not_reported(like: str, scale: str):
    assert mp204_lines(like, scale) == []  # exp(-20), exp(0), exp(2)
