"""A name derived from a rebound name holds what the rebound name held where it was derived.

``mu = y_pred`` (float16), ``mu = ops.cast(mu, "float32")``, ``z = (y - mu) / 2.0``: the name table joins mu's two
values (unknown) and computed z's entry from that unknown mu: float16 (with y). At z's site ``y - mu`` is float32,
so every name derived after the cast-back stayed float16: MP204 reported ``ops.exp(z)`` (wave 12's mixture-density
loss after its fix, which casts the split parts to float32). Now a name whose entry rests on a name only flow decides
is read where it stands: its reaching assignment, evaluated where it is (``dtype_env.flow_read``); branches and loops
still join. MP206 keeps reading the joined table (``dtype_insensitive``).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from mpfix.codemods import all_rules
from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.facts.dtype_facts import facts_for
from mpfix.engine import Engine, Options

LOSS = '''
import keras
from keras import layers, ops


class PriceModel(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.head = layers.Dense(3)

    def call(self, x):
        return self.head(x)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        base = ops.square(y_pred)
        mu = y_pred
{body}
        z = (base - mu) / 2.0
        w = ops.exp(z)
        return ops.mean(ops.log(w))
'''


def _dtypes(code: str, expression: str, keras: int = 3) -> list[Dtype]:
    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    facts = facts_for(module, keras)
    found = [n for n in walk(module) if isinstance(n, cst.BaseExpression) and facts.place(n) is not None
             and module.code_for_node(n) == expression]
    assert found, expression
    return [facts.dtype_of(n) for n in found]


def _loss(body: str) -> str:
    return LOSS.format(body=textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8))


def test_names_derived_after_a_cast_back_are_float32():
    code = _loss('mu = ops.cast(mu, "float32")')
    assert _dtypes(code, "(base - mu) / 2.0") == [Dtype.FLOAT32]
    assert _dtypes(code, "ops.exp(z)") == [Dtype.FLOAT32]  # HEAD: FLOAT16 (z's entry read an unknown mu)
    assert _dtypes(code, "w")[-1] is Dtype.FLOAT32


def test_a_chain_of_derived_names_follows_the_cast():
    code = _loss('''
        mu = ops.cast(mu, "float32")
        centred = base - mu
        scaled = centred * 0.5''').replace("z = (base - mu) / 2.0", "z = scaled / 2.0")
    assert _dtypes(code, "ops.exp(z)") == [Dtype.FLOAT32]


def test_a_name_derived_before_the_cast_keeps_float16():
    code = _loss('''
        early = base - mu
        mu = ops.cast(mu, "float32")''').replace("w = ops.exp(z)", "w = ops.exp(early) + z")
    assert _dtypes(code, "ops.exp(early)") == [Dtype.FLOAT16]
    assert _dtypes(code, "ops.exp(early) + z") == [Dtype.FLOAT32]


def test_cast_back_to_float16_is_float16_again():
    code = _loss('''
        mu = ops.cast(mu, "float32")
        mu = ops.cast(mu, "float16")''')
    assert _dtypes(code, "ops.exp(z)") == [Dtype.FLOAT16]


@pytest.mark.parametrize("body", [
    # One branch casts: after the if mu is float16 or float32; z stays what the joined table says.
    '''
    if training:
        mu = ops.cast(mu, "float32")''',
    # A loop: its later passes see the loop's own assignments; the joined table stands.
    '''
    for _ in range(2):
        mu = ops.cast(mu, "float32")
        mu = mu * 2.0''',
])
def test_branches_and_loops_still_join(body):
    code = _loss(body)
    assert _dtypes(code, "ops.exp(z)") == [Dtype.FLOAT16]


def _lint(code: str):
    code = textwrap.dedent(code).lstrip("\n")
    rules = tuple(all_rules())
    return Engine(rules, Options(keras="3", project_policy=False, policy="mixed_float16")).lint(
        code, Path("train.py")).findings


def test_mp204_no_longer_reports_the_exp_of_a_name_derived_after_the_cast():
    fixed = _loss('mu = ops.cast(mu, "float32")').replace("z = (base - mu) / 2.0", "z = (base - mu) / 2.0 + 10.0")
    unfixed = _loss("mu = mu * 1.0").replace("z = (base - mu) / 2.0", "z = (base - mu) / 2.0 + 10.0")
    assert [f.line for f in _lint(unfixed) if f.code == "MP204" and "ops.exp" in f.message] == [18]
    assert [f.line for f in _lint(fixed) if f.code == "MP204" and "ops.exp" in f.message] == []  # HEAD: [18]


TARGETS = '''
import keras
from keras import layers, ops


class Regressor(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.head = layers.Dense(3)

    def call(self, x):
        return self.head(x)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        weight = ops.exp(y)
        return ops.mean(weight * ops.square(y_pred))
'''


def test_compute_loss_targets_are_the_datas_not_float16():
    """Keras passes ``compute_loss`` the batch's targets as the data holds them, never autocast (ran, Keras 3 ``fit``
    on float32 arrays under mixed_float16: ``y`` is float32 and ``y - y_pred`` of a float16 head raises a TypeError);
    a ``tf.data`` pipeline keeps its own dtype. They were float16 by default: MP204 reported ``ops.exp(y)``."""
    assert _dtypes(TARGETS, "ops.exp(y)") == [Dtype.UNKNOWN]  # HEAD: FLOAT16
    assert _dtypes(TARGETS, "ops.square(y_pred)") == [Dtype.FLOAT16]  # the float16 head's output stays
    assert [f.line for f in _lint(TARGETS) if f.code == "MP204"] == []  # HEAD: [14]
    exp_of_predictions = TARGETS.replace("ops.exp(y)", "ops.exp(y_pred)")
    assert [f.line for f in _lint(exp_of_predictions) if f.code == "MP204"] == [14]
