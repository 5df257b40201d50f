"""Every rule's messages are templates with named fields, filled by the fields its reports give.

The reports come from running each rule's INVALID examples (on each Keras generation they hold
for): a template that names a field its reports do not give, or a report that gives a field its
template does not name (a typo on either side), fails here.
"""

from __future__ import annotations

import itertools

import pytest

from mpfix import cache
from mpfix.codemods import all_rules
from mpfix.codemods.base import Rule, TemplateError, render, template_fields
from mpfix.testing import lint_snippet

GENERATIONS = (2, 3)


def _examples():
    for rule in all_rules():
        for index, example in enumerate(rule.INVALID):
            for keras in ([example.keras] if example.keras else GENERATIONS):
                if keras in rule.keras_generations:
                    yield rule, index, example, keras


@pytest.fixture(scope="module")
def reports():
    """``(rule class, example id, Report)`` of every report every INVALID example makes."""
    seen: list = []
    original = Rule.report

    def recording(self, node, *args, **kwargs):
        before = len(self.context.reports)
        original(self, node, *args, **kwargs)
        seen.extend((type(self), current, report) for _, report in self.context.reports[before:])

    Rule.report = recording
    try:
        for rule, index, example, keras in _examples():
            current = f"{rule.code}-invalid{index}-keras{keras}"
            lint_snippet(example.code, rule.code, keras=keras, policy=example.policy)
    finally:
        Rule.report = original
    return seen


def _compositions(rule):
    """Every text a report of ``rule`` may render from: a template, then up to two notes."""
    notes = rule.all_notes()
    for name in (None, *rule.messages):
        text = rule.message_template(name)
        yield name, (), text
        for count in (1, 2):
            for chosen in itertools.permutations(notes, count):
                yield name, chosen, text + "".join(f" ({notes[n]})" for n in chosen)


def test_every_declared_template_parses_into_plain_named_fields():
    for rule in all_rules():
        for name, template in rule.templates().items():
            assert template.strip() == template and template, (rule.code, name)
            template_fields(template)  # raises TemplateError on {0}, {x.y}, {x!r}, {x:>3}, a reserved name


def test_every_report_fills_exactly_the_fields_its_template_names(reports):
    # Every example ran and reported (more reports than findings: the engine drops some, e.g. suppressed).
    assert len(reports) >= sum(example.count for _, _, example, _ in _examples()), len(reports)
    for rule, example, report in reports:
        assert report.template, (example, "a report without a template", report.message)
        assert template_fields(report.template) == set(report.fields), (example, report.template, report.fields)
        assert render(report.template, report.fields) == report.message, example
        declared = {text for _, _, text in _compositions(rule)}
        assert report.template in declared, (example, "renders from a template the rule does not declare",
                                             report.template)


def test_every_named_template_is_shown_by_an_example(reports):
    """A template no example renders is documentation nobody checks: each has an INVALID example.

    Notes (why a fix is withheld in a rarer shape) are exercised by the rule tests instead.
    """
    used: dict[type, set] = {}
    for rule, _, report in reports:
        used.setdefault(rule, set()).add(report.template)
    missing = []
    for rule in all_rules():
        rendered = used.get(rule, set())
        for name in rule.messages:
            texts = {text for variant, _, text in _compositions(rule) if variant == name}
            if not rendered & texts:
                missing.append(f"{rule.code}:{name}")
    assert missing == [], " ".join(missing)


def test_a_misspelt_field_fails():
    with pytest.raises(TemplateError, match=r"missing fields \['op'\], unknown fields \['opp'\]"):
        render("`{op}` of a float16 tensor overflows", {"opp": "exp"})
    with pytest.raises(TemplateError, match="not a plain"):
        template_fields("{0} overflows")
    with pytest.raises(TemplateError, match="not a plain"):
        template_fields("{op!r} overflows")
    with pytest.raises(TemplateError, match="keyword of Rule.report"):
        template_fields("{fix} is wrong")
    with pytest.raises(TemplateError):
        template_fields("an unclosed {brace")
    assert template_fields("a literal {{brace}} and `{op}`") == {"op"}
    assert render("a literal {{brace}} and `{op}`", {"op": "exp"}) == "a literal {brace} and `exp`"


def test_a_report_naming_an_undeclared_template_fails():
    rule = next(r for r in all_rules() if r.code == "MP306")
    with pytest.raises(TemplateError, match="has no message template 'renamd'"):
        rule.message_template("renamd")
    with pytest.raises(TemplateError, match="has no note template"):
        rule.note_template("nope")


def test_findings_carry_their_fields_through_the_cache():
    code = """
        import tensorflow as tf

        @tf.function(experimental_relax_shapes=True)
        def step(x):
            return x
        """
    result = lint_snippet(code, "MP306", keras=3)
    [finding] = result.findings
    assert finding.fields == {"old": "experimental_relax_shapes", "new": "reduce_retracing"}
    assert finding.message == "`tf.function(experimental_relax_shapes=...)` is deprecated; use `reduce_retracing=...`"
    again = cache.finding_from_dict(cache.finding_to_dict(finding), finding.filename)
    assert again.fields == finding.fields and again.message == finding.message
    assert cache._valid_finding(cache.finding_to_dict(finding))
    assert not cache._valid_finding({**cache.finding_to_dict(finding), "fields": {"old": 1}})
