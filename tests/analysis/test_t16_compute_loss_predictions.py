"""``y_pred`` in a Keras model's own ``compute_loss`` is what the model's ``call`` returns.

Keras passes ``compute_loss`` the model's output by the keyword ``y_pred`` (Keras 3 ``Trainer.train_step``:
``self.compute_loss(x=x, y=y, y_pred=y_pred, ...)``; tf_keras the same). The analysis took it as float16 under a
mixed policy whatever the model returns, so after MP205's own fix (the head built with ``dtype="float32"``) a
mixture-density loss was still reported at its ``exp`` and ``log`` (wave 12's ``mdn_density_k3``). When ``call``
returns float32 whatever its inputs, ``y_pred`` is float32; otherwise nothing changes (float16 by default).
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.facts.dtype_facts import facts_for

MODEL = '''
import keras
from keras import layers, ops


class PriceMDN(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.body = layers.Dense(128, activation="tanh")
        self.head = layers.Dense(15{head})

    def call(self, x):
        return self.head(self.body(x))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        logits, mu, log_sigma = ops.split(y_pred, 3, axis=-1)
        sigma = ops.exp(log_sigma)
        return ops.mean(sigma)
'''


def _dtype(code: str, expression: str) -> Dtype:
    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    facts = facts_for(module, 3)
    found = [n for n in walk(module) if isinstance(n, cst.BaseExpression) and facts.place(n) is not None
             and module.code_for_node(n) == expression]
    assert found, expression
    return facts.dtype_of(found[-1])


@pytest.mark.parametrize(("head", "expected"), [
    (', dtype="float32"', Dtype.FLOAT32),  # MP205's fix: the predictions the loss gets are float32
    ("", Dtype.FLOAT16),  # the policy's float16 head: unchanged
    (', dtype="mixed_float16"', Dtype.FLOAT16),
])
def test_compute_loss_predictions_are_what_call_returns(head, expected):
    code = MODEL.format(head=head)
    assert _dtype(code, "y_pred") is expected
    assert _dtype(code, "ops.exp(log_sigma)") is expected


def test_a_call_that_returns_float32_on_one_path_only_leaves_the_default():
    code = MODEL.format(head="").replace(
        "return self.head(self.body(x))",
        "h = self.head(self.body(x))\n        if training:\n            return h\n"
        "        return ops.cast(h, \"float32\")").replace("def call(self, x):", "def call(self, x, training=False):")
    assert "if training:" in code
    assert _dtype(code, "y_pred") is Dtype.FLOAT16
