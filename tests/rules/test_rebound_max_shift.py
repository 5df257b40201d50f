"""Held-out wave 15's spatial_softmax_policy_k2_ok (turn 19, a correct script): a softmax written by hand as
``logits = logits - reduce_max(logits, -1, keepdims=True); exp(logits)``. MP204 knew ``exp(x - max(x))`` is at most 1,
but read the name ``logits`` at the exp, not the max shift its binding that reaches the exp holds: a false MP204
(patch by wave15, committed by the lead)."""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

LAYER = """
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
import tf_keras as keras

keras.mixed_precision.set_global_policy("mixed_float16")


class SpatialSoftmax(keras.layers.Layer):
    def call(self, features):
        logits = tf.reshape(features, [-1, 16]) / 0.5
{shift}        return tf.exp(logits)
"""
SHIFT = "        logits = logits - tf.reduce_max(logits, axis=-1, keepdims=True)\n"


def mp204(shift: str) -> list[int]:
    code = LAYER.format(shift=shift)
    compile(code, "policy.py", "exec")
    return [f.line for f in lint_snippet(code, ("MP204",), keras="2", filename="policy.py").findings]


def test_exp_of_a_name_rebound_to_its_own_max_shift_is_not_reported():
    assert mp204(SHIFT) == []


@pytest.mark.parametrize("shift", ["", "        logits = logits + tf.reduce_max(logits, axis=-1, keepdims=True)\n"],
                         ids=["no shift", "max added"])
def test_without_the_shift_the_exp_is_reported(shift: str):
    assert mp204(shift) == [14 if shift else 13]
