"""Each rule declares the facts it queries (``Rule.uses``), and reads no other.

Every rule runs alone over its VALID and INVALID examples; what its run builds in the file's
shared ``RuleContext.cache`` (and whether it reads ``RuleContext.project``) is compared with what
the providers of its declared facts build on the same code, run alone by a probe rule. A rule that
starts to query an undeclared fact fails here, and so does a declared fact none of its examples use.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.codemods._mp_api_support import declared_tf_min
from mpfix.codemods.analysis import version_guards
from mpfix.codemods.analysis.gradient_path import training_steps
from mpfix.codemods.analysis.model_outputs import model_facts
from mpfix.codemods.base import Fact, Rule
from mpfix.codemods.facts.dtype_facts import dtype_facts
from mpfix.engine import Engine, Options

PROVIDERS = {
    Fact.DTYPES: dtype_facts,
    Fact.GRADIENT_PATH: training_steps,
    Fact.MODEL_OUTPUTS: model_facts,
    Fact.VERSION_GUARDS: version_guards.of,
    Fact.DECLARED_TF: declared_tf_min,
}
_ENGINE_KEYS = "mpfix.engine."  # the engine's own entries (float16 regions), set outside the rules


class _RecordingProject:
    """``RuleContext.project`` that notes each read."""

    def __init__(self, real, reads: list):
        self._real, self._reads = real, reads

    def __getattr__(self, name):
        self._reads.append(name)
        return getattr(self._real, name)


@pytest.fixture
def recorder(monkeypatch):
    """Runs rules through the engine and returns what each run built: (cache keys, project read)."""
    built: dict = {"keys": set(), "project": []}
    original = Engine._visit

    def visit(self, module, context, rules):
        before = set(context.cache)
        real = context.project
        context.project = _RecordingProject(real, built["project"])
        try:
            original(self, module, context, rules)
        finally:
            context.project = real
        built["keys"] |= {k for k in set(context.cache) - before if not k.startswith(_ENGINE_KEYS)}

    monkeypatch.setattr(Engine, "_visit", visit)

    def run(rules, code, keras, policy):
        built["keys"], built["project"] = set(), []
        engine = Engine(rules, Options(keras=str(keras), policy=policy, unsafe_fixes=True, project_policy=False))
        engine.lint(textwrap.dedent(code).lstrip("\n"), Path("snippet.py"))
        return set(built["keys"]), bool(built["project"])

    return run


def _probe(facts: frozenset[Fact]) -> type[Rule]:
    """A rule that only builds ``facts``."""

    class Probe(Rule):
        code = "MP999"
        name = "probe"
        message = "probe"
        triggers = ("",)

        def visit_Module(self, node) -> None:
            for fact in facts:
                if fact in PROVIDERS:
                    PROVIDERS[fact](self.context)

    return Probe


def _runs(rule):
    for example in (*rule.VALID, *rule.INVALID):
        for keras in ([example.keras] if example.keras else (2, 3)):
            if keras in rule.keras_generations:
                yield example, keras


def test_every_rule_declares_the_facts_it_uses():
    assert [r.code for r in all_rules() if r.uses is None] == []
    assert set(PROVIDERS) | {Fact.PROJECT} == set(Fact), "a fact without a provider in this test"


@pytest.mark.parametrize("rule", [r for r in all_rules() if r.uses is not None], ids=lambda r: r.code)
def test_a_rule_builds_only_the_facts_it_declares(rule, recorder):
    used: set[Fact] = set()
    for example, keras in _runs(rule):
        keys, read_project = recorder([rule], example.code, keras, example.policy)
        # A declared fact may read the project itself (the dtype facts seed the functions other files call).
        allowed, facts_read_project = recorder([_probe(rule.uses)], example.code, keras, example.policy)
        assert keys <= allowed, (f"{rule.code} builds {sorted(keys - allowed)}, which its declared facts "
                                 f"{sorted(f.name for f in rule.uses)} do not: declare the fact in `uses`",
                                 example.code)
        assert not read_project or Fact.PROJECT in rule.uses or facts_read_project, (rule.code, "reads RuleContext.project")
        used |= {fact for fact in Fact if fact.value in keys}
        used |= {Fact.PROJECT} if read_project and (Fact.PROJECT in rule.uses or not facts_read_project) else set()
    assert used == set(rule.uses), (f"{rule.code} declares {sorted(f.name for f in rule.uses - used)} but none "
                                    "of its examples uses it")


def test_an_undeclared_fact_is_caught(recorder):
    """The check itself: a rule that queries the gradient path but declares only version guards."""

    class Sneaky(Rule):
        code = "MP998"
        name = "sneaky"
        message = "sneaky"
        triggers = ("",)
        uses = frozenset({Fact.VERSION_GUARDS})

        def visit_Module(self, node) -> None:
            training_steps(self.context)

    code = "import tensorflow as tf\n"
    keys, _ = recorder([Sneaky], code, 3, None)
    allowed, _ = recorder([_probe(Sneaky.uses)], code, 3, None)
    assert Fact.GRADIENT_PATH.value in keys - allowed
    assert Fact.VERSION_GUARDS.value in allowed
