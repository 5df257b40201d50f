"""The prefilter: files no selected rule can match are never parsed."""

from __future__ import annotations

import re
from pathlib import Path

from mpfix.codemods.base import triggered
from mpfix.engine import Engine, Options
from mpfix.selection import select


def test_triggers_are_substrings_or_regexes_on_text_and_bytes():
    big = re.compile(r"\d[eE]\+?(?:[5-9]|\d\d)\b")
    assert triggered(("GradientTape", big), "x * -1e9")
    assert triggered(("GradientTape", big), b"x * -1e9")
    assert not triggered(("GradientTape", big), "Exception: e1 or 1e-9")
    assert triggered(("GradientTape",), "with tf.GradientTape() as t:".encode("latin-1"))


def _lint(text: str, policy: str | None):
    engine = Engine(select(("ALL",), ()), Options(policy=policy, project_policy=False))
    return engine.lint(text, Path("t.py"))


def test_float16_only_rules_do_not_cause_a_parse_without_a_float16_policy():
    # Only the float16 rules' triggers occur, and the file does not parse: whether mpfix
    # parsed it shows in MP000.
    broken = "import tensorflow as tf\ny = tf.exp(x) * -1e9 +\n"
    assert _lint(broken, None).errors == []
    assert _lint(broken, "float32").errors == []
    assert [e.code for e in _lint(broken, "mixed_float16").errors] == ["MP000"]
