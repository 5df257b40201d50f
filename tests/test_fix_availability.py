"""Fix availability (does a finding come with a fix?) is declared apart from each fix's applicability
(safe/unsafe), as Ruff does; ``explain`` and docs/rules.md state both, and the examples hold rules to them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.codemods.base import FixAvailability
from mpfix.engine import Engine, Options
from mpfix.findings import FixSafety
from mpfix.rule_docs import explain, fix_summary

DECLARED = [r for r in all_rules() if r.fix_availability is not None]


def _findings(rule, example, keras: int):
    engine = Engine((rule,), Options(keras=str(keras), policy=example.policy, unsafe_fixes=True,
                                     project_policy=example.policy is None))
    return [f for f in engine.lint(example.code, Path("example.py"), fix=False).findings if f.code == rule.code]


@pytest.mark.parametrize("rule", DECLARED, ids=[r.code for r in DECLARED])
def test_findings_keep_to_the_declared_availability_and_applicability(rule):
    seen = []
    for example in rule.INVALID:
        for keras in ([example.keras] if example.keras else [2, 3]):
            seen += _findings(rule, example, keras)
    assert seen, "no example produces a finding"
    for finding in seen:
        if finding.fix is not None:
            assert finding.fix_safety in rule.applicabilities(), (finding.line, finding.fix_safety)
        elif rule.availability() is FixAvailability.ALWAYS:
            pytest.fail(f"{rule.code} declares a fix always, but line {finding.line} has none")


def test_explain_states_availability_and_applicability_apart():
    rules = {r.code: r for r in all_rules()}
    assert fix_summary(rules["MP207"]) == "always available; unsafe"
    assert fix_summary(rules["MP206"]) == "sometimes available; unsafe"
    assert fix_summary(rules["MP205"]) == "sometimes available; safe or unsafe"
    assert "Fix: sometimes available; unsafe" in explain(rules["MP202"])
    assert rules["MP205"].applicabilities() == (FixSafety.SAFE, FixSafety.UNSAFE)
    report_only = [r for r in all_rules() if r.fix_safety is FixSafety.NONE]
    assert all(fix_summary(r) == "none (report only)" for r in report_only)


def test_rules_doc_states_both():
    text = (Path(__file__).resolve().parent.parent / "docs" / "rules.md").read_text(encoding="utf-8")
    assert "Fix: sometimes available; safe or unsafe." in text  # MP205
    assert "Fix: always available; unsafe." in text  # MP207
