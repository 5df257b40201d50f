"""``mpfix.positions.positions_of`` gives exactly ``PositionProvider``'s ranges, for the nodes asked."""

from __future__ import annotations

import random

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider
import pytest

from mpfix.positions import positions_of
from test_walk import SNIPPET, _corpus

# Line breaks of every kind, in code, comments, strings and continuation lines.
MIXED_NEWLINES = "x = 1\r\ny = (2,\r    3)\rz = '''a\r\nb'''  # c\n\\\n  + 4\n"


def _texts() -> list[str]:
    texts = [SNIPPET, SNIPPET.replace("\n", "\r\n"), MIXED_NEWLINES, "", "pass"]
    return texts + [path.read_text(encoding="utf-8") for path in _corpus()]


def _reference(module: cst.Module) -> dict:
    return dict(MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider))


@pytest.mark.slow  # a corpus-equivalence check (~60 s on two cores): `pytest -m "not slow"` skips it
def test_all_nodes_and_a_few_nodes_match_position_provider():
    rng = random.Random(8)
    count = 0
    for text in _texts():
        module = cst.parse_module(text)
        expected = _reference(module)
        assert positions_of(module, expected) == expected
        count += len(expected)
        # A few nodes: generation stops once they are placed; the ranges must not change.
        nodes = list(expected)
        for size in (1, 2, 5):
            asked = rng.sample(nodes, min(size, len(nodes)))
            assert positions_of(module, asked) == {node: expected[node] for node in asked}
    assert count > 500_000  # about a million nodes: the largest keras modules and mpfix's own


def test_nodes_outside_the_module_are_left_out():
    module = cst.parse_module("a = b\n")
    stranger = cst.Name("c")
    name = module.body[0].body[0].value
    got = positions_of(module, [stranger, name])
    assert list(got) == [name]
    assert (got[name].start.line, got[name].start.column, got[name].end.column) == (1, 4, 5)
    assert positions_of(module, []) == {}
