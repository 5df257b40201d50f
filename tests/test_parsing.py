"""``mpfix.parsing.parse_module`` builds LibCST's tree without re-validating it, and nothing else changes."""

from __future__ import annotations

import libcst as cst
import pytest

from mpfix.parsing import parse_module, validation_active
from test_walk import SNIPPET, _corpus


@pytest.mark.slow  # a corpus-equivalence check (~60 s on two cores): `pytest -m "not slow"` skips it
def test_same_tree_as_libcst_on_real_code():
    texts = [SNIPPET, SNIPPET.replace("\n", "\r\n")]
    texts += [path.read_text(encoding="utf-8") for path in _corpus()]
    for text in texts:
        ours = parse_module(text)
        assert ours.deep_equals(cst.parse_module(text))
        assert ours.code == text
    assert validation_active()


def test_parser_built_nodes_skip_validation_and_hand_built_ones_keep_it(monkeypatch):
    calls = []
    original = cst.Name._validate
    monkeypatch.setattr(cst.Name, "_validate", lambda self: calls.append(self.value) or original(self))

    parse_module("x = y\n")
    assert calls == []  # the parser's own nodes: not re-checked
    cst.parse_module("x = y\n")
    assert calls == ["x", "y"]  # plain LibCST checks every one

    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")  # a fix's replacement nodes are still validated


def test_syntax_errors_are_libcst_errors_and_validation_comes_back():
    with pytest.raises(cst.ParserSyntaxError) as ours:
        parse_module("def f(:\n    pass\n")
    with pytest.raises(cst.ParserSyntaxError) as theirs:
        cst.parse_module("def f(:\n    pass\n")
    assert (ours.value.raw_line, ours.value.raw_column, ours.value.message) == (
        theirs.value.raw_line, theirs.value.raw_column, theirs.value.message)
    assert validation_active()
    with pytest.raises(cst.CSTValidationError):
        cst.Name("1x")
