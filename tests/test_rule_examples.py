"""Every rule's VALID/INVALID examples are tests (Fixit's model): docs cannot drift from behaviour."""

from __future__ import annotations

import pytest

from mpfix.codemods import all_rules
from mpfix.codemods.base import triggered
from mpfix.testing import lint_snippet

GENERATIONS = (2, 3)


def _cases(kind: str):
    for rule in all_rules():
        for index, example in enumerate(getattr(rule, kind)):
            for keras in ([example.keras] if example.keras else GENERATIONS):
                if keras in rule.keras_generations or kind == "VALID":
                    yield pytest.param(rule, example, keras, id=f"{rule.code}-{kind.lower()}{index}-keras{keras}")


@pytest.mark.parametrize(("rule", "example", "keras"), list(_cases("VALID")))
def test_valid_example_is_not_flagged(rule, example, keras):
    result = lint_snippet(example.code, rule.code, keras=keras, policy=example.policy)
    assert not result.errors, result.errors
    assert [f for f in result.findings if f.code == rule.code] == []


@pytest.mark.parametrize(("rule", "example", "keras"), list(_cases("INVALID")))
def test_invalid_example_is_flagged_and_fixed(rule, example, keras):
    result = lint_snippet(example.code, rule.code, keras=keras, policy=example.policy)
    assert not result.errors, result.errors
    found = [f for f in result.findings if f.code == rule.code]
    assert len(found) == example.count, [(f.line, f.message) for f in found]
    if example.expected is None:
        return
    assert any(f.fix is not None for f in found), "example names a fix but the finding has none"
    fixed = lint_snippet(example.code, rule.code, keras=keras, policy=example.policy, fix=True)
    assert not fixed.errors, fixed.errors
    assert fixed.fixed_text == example.expected
    # A second run changes nothing and reports no fixable finding of this rule.
    again = lint_snippet(example.expected, rule.code, keras=keras, policy=example.policy, fix=True)
    assert again.fixed_text is None
    assert not [f for f in again.findings if f.code == rule.code and f.fix is not None]


def test_every_rule_documents_itself():
    for rule in all_rules():
        assert rule.code.startswith("MP") and len(rule.code) == 5, rule
        assert rule.name == rule.name.lower() and " " not in rule.name, rule
        assert rule.triggers, f"{rule.code} declares no trigger substrings"
        assert rule.INVALID, f"{rule.code} has no INVALID example"
        assert rule.VALID, f"{rule.code} has no VALID example"
        for heading in ("## What it does", "## Why is this bad?", "## Example"):
            assert heading in rule.doc(), f"{rule.code} explanation lacks {heading!r}"


def test_triggers_appear_in_every_invalid_example():
    # Otherwise the prefilter would skip a file the rule should flag.
    for rule in all_rules():
        for example in rule.INVALID:
            assert triggered(rule.triggers, example.code), (rule.code, example.code)
            assert triggered(rule.triggers, example.code.encode()), (rule.code, "bytes", example.code)
