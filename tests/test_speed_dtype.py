"""The dtype analysis' shortcuts decide exactly what the code they replace decided (turn 13, speed)."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtype_lattice import number
from mpfix.codemods.analysis.dtype_syntax import blocks, mentions
from mpfix.codemods.analysis.dtypes import DtypeAnalysis
from mpfix.codemods.facts import heuristics

SOURCE = '''
import tensorflow as tf

class A(tf.keras.layers.Layer):
    def __init__(self, **kw):
        # autocast=False is not passed here, yet the regex on the code sees this comment
        super().__init__(**kw)

class B(tf.keras.layers.Layer):
    def __init__(self, **kw):
        super().__init__(autocast=False, **kw)

class C(tf.keras.layers.Layer):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.note = "autocast = False"

class D(tf.keras.layers.Layer):
    def __init__(self, **kw):
        super().__init__(**kw)

    def call(self, x):
        if x.dtype == tf.float16:  # a guard
            return x
        if (x  # half
            ):
            return x
        return x
'''


def _alternatives(pattern: re.Pattern) -> list[str]:
    return pattern.pattern.replace("\\.", ".").split("|")


def test_every_alternative_of_the_regexes_holds_one_of_its_words():
    """``mentions`` looks for the words before the code is generated: a regex alternative without one of them
    could match code ``mentions`` says cannot match."""
    for pattern, words in ((heuristics.AUTOCAST_FALSE, heuristics.AUTOCAST_WORDS),
                           (heuristics.GUARD, heuristics.GUARD_WORDS),
                           (heuristics.FLOAT16_TEST, heuristics.GUARD_WORDS)):
        for alternative in _alternatives(pattern):
            assert any(word in alternative for word in words), (pattern.pattern, alternative)


def test_mentions_agrees_with_the_regex_on_generated_code_comments_and_strings_included():
    module = cst.parse_module(SOURCE)
    inits = {cls.name.value: cls.body.body[0] for cls in module.body if isinstance(cls, cst.ClassDef)}
    found = {name: mentions(init, heuristics.AUTOCAST_WORDS) for name, init in inits.items()}
    assert found == {"A": True, "B": True, "C": True, "D": False}
    for init in inits.values():
        matched = heuristics.AUTOCAST_FALSE.search(module.code_for_node(init)) is not None
        assert not matched or mentions(init, heuristics.AUTOCAST_WORDS)
    tests = [node.test for node in walk(module) if isinstance(node, cst.If)]
    assert [mentions(t, heuristics.GUARD_WORDS) for t in tests] == [True, True]  # the second by its comment only
    assert [heuristics.GUARD.search(module.code_for_node(t)) is not None for t in tests] == [True, True]


def test_layers_autocast_as_their_init_code_says():
    module = cst.parse_module(SOURCE)
    analysis = DtypeAnalysis(module, lambda node: None)
    verdicts = {name: analysis.autocasts(cls) for name, cls in analysis.classes.items()}
    assert verdicts == {"A": False, "B": False, "C": False, "D": True}  # A and C by the regex on their code, as before


def test_number_and_blocks_by_exact_types():
    module = cst.parse_module("x = -(+-1.5)\ny = float('-inf')\nz = np.inf\nw = a\n"
                              "if a:\n    pass\nelif b:\n    pass\nelse:\n    pass\n"
                              "try:\n    pass\nexcept E:\n    pass\nfinally:\n    pass\n")
    values = [stmt.body[0].value for stmt in module.body[:4]]
    assert [number(v) for v in values] == [1.5, float("-inf"), float("inf"), None]
    assert len(blocks(module.body[4])) == 3
    assert len(blocks(module.body[5])) == 3


def test_the_analysis_generates_each_node_once():
    module = cst.parse_module(SOURCE)
    analysis = DtypeAnalysis(module, lambda node: None)
    base = analysis.classes["A"].bases[0].value
    assert analysis.code(base) == "tf.keras.layers.Layer"
    assert analysis.code(base) is analysis.code(base)
