"""The summary says which files the float16 rules skipped because no mixed policy reaches them.

Issue 23: a library whose layer adds ``(1.0 - mask) * -1e9`` to its scores, with no file that
sets a policy, got "All checks passed!" and exit 0, and nothing said that the float16 rules never
ran. The hint is one line, never changes the exit code, and is run metadata in JSON and SARIF.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mpfix import policy as policies
from mpfix.cli import cli

LAYER = """\
import tensorflow as tf


class MaskedAttention(tf.keras.layers.Layer):
    def call(self, query, key, mask):
        scores = tf.matmul(query, key, transpose_b=True)
        scores += (1.0 - mask) * -1e9
        return tf.nn.softmax(scores)
"""

# A custom loop (MP102's trigger too, so the file is parsed even when float16 rules drop out).
LOOP = """\
import tensorflow as tf


def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""

FLOAT16_CODES = ("MP101", "MP112", "MP2")


def mpfix(*args: str):
    policies.forget_projects()  # files were written since the last run in this process
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def library(project: Path) -> Path:
    """The issue's package: layers and a loop, no script, nothing sets a policy."""
    (project / "attn").mkdir()
    (project / "attn" / "__init__.py").write_text("from attn.layers import MaskedAttention\n")
    (project / "attn" / "layers.py").write_text(LAYER)
    (project / "attn" / "loop.py").write_text(LOOP)
    (project / "attn" / "utils.py").write_text("def identity(x):\n    return x\n")
    return project


def _hint(output: str) -> list[str]:
    return [line for line in output.splitlines() if "not checked for float16" in line]


def _float16_files(items: list[dict]) -> set[str]:
    return {i["filename"] for i in items if i["code"].startswith(FLOAT16_CODES)}


def test_library_gets_one_line_and_its_count_matches_a_mixed_float16_run(library: Path):
    result = mpfix("check", "--no-cache", ".")
    assert result.exit_code == 0, result.output
    assert "All checks passed!" in result.output
    (hint,) = _hint(result.output)
    assert hint.startswith("2 files were not checked for float16")
    assert "nothing in the project sets mixed_float16" in hint  # the library wording
    assert '`policy = "mixed_float16"` in [tool.mpfix]' in hint and "`--policy mixed_float16`" in hint
    assert "float16 findings, if any, were not counted" in hint  # counting needs the analysis the run skipped

    stress = mpfix("check", "--no-cache", "--format", "json", "--policy", "mixed_float16", ".")
    assert stress.exit_code == 1
    assert len(_float16_files(json.loads(stress.output))) == 2
    assert "MP201" in {i["code"] for i in json.loads(stress.output)}


def test_the_hint_survives_a_warm_cache(library: Path):
    cold = mpfix("check", ".")
    warm = mpfix("check", ".")
    assert _hint(cold.output) == _hint(warm.output) != []
    assert warm.exit_code == 0


def test_machine_formats_carry_it_as_run_metadata(library: Path):
    plain = json.loads(mpfix("check", "--no-cache", "--format", "json", ".").output)
    assert plain == []  # Ruff's shape: a bare list of findings, untouched

    run = json.loads(mpfix("check", "--no-cache", "--format", "json-run", ".").output)
    assert run["findings"] == []
    meta = run["run"]["float16Unchecked"]
    assert meta["files"] == 2 and meta["findings"] is None and meta["library"] is True
    assert sorted(Path(p).name for p in meta["paths"]) == ["layers.py", "loop.py"]

    sarif = json.loads(mpfix("check", "--no-cache", "--format", "sarif", ".").output)
    props = sarif["runs"][0]["properties"]["float16Unchecked"]
    assert props["files"] == 2 and sorted(props["paths"]) == ["attn/layers.py", "attn/loop.py"]

    github = mpfix("check", "--no-cache", "--format", "github", ".")
    assert github.exit_code == 0
    (notice,) = [line for line in github.output.splitlines() if line.startswith("::notice")]
    assert "2 files were not checked for float16" in notice


def test_findings_elsewhere_keep_their_exit_code_and_the_hint(library: Path):
    (library / "attn" / "old.py").write_text("import tensorflow as tf\n\n\n"
                                             "tf.config.experimental_run_functions_eagerly(True)\n")
    result = mpfix("check", "--no-cache", ".")
    assert result.exit_code == 1
    assert "Found 1 finding" in result.output
    assert len(_hint(result.output)) == 1


def test_only_the_files_no_entry_point_reaches_are_counted(project: Path):
    (project / "models").mkdir()
    (project / "models" / "__init__.py").write_text("")
    (project / "models" / "used.py").write_text(LAYER)
    (project / "models" / "unused.py").write_text(LAYER.replace("MaskedAttention", "Other"))
    (project / "train.py").write_text(
        "import tensorflow as tf\nfrom models.used import MaskedAttention\n\n"
        "tf.keras.mixed_precision.set_global_policy('mixed_float16')\nlayer = MaskedAttention()\n")
    result = mpfix("check", "--no-cache", ".")
    assert result.exit_code == 1  # used.py is reached: its MP201 is a finding
    (hint,) = _hint(result.output)
    assert hint.startswith("1 file was not checked for float16 (no mixed_float16 policy reaches it;")
    meta = json.loads(mpfix("check", "--no-cache", "--format", "json-run", ".").output)["run"]["float16Unchecked"]
    assert [Path(p).name for p in meta["paths"]] == ["unused.py"] and meta["library"] is False


@pytest.mark.parametrize("how", ["--policy", "config"])
@pytest.mark.parametrize("value", ["mixed_float16", "float32"])
def test_no_hint_when_a_policy_is_configured(library: Path, how: str, value: str):
    args = ["check", "--no-cache", "."]
    if how == "--policy":
        args += ["--policy", value]
    else:
        (library / "pyproject.toml").write_text(f"[project]\nname = 'demo'\n\n[tool.mpfix]\npolicy = \"{value}\"\n")
    result = mpfix(*args)
    assert _hint(result.output) == []
    assert result.exit_code == (1 if value == "mixed_float16" else 0)


def test_no_hint_when_the_float16_rules_are_not_selected(library: Path):
    result = mpfix("check", "--no-cache", "--ignore", "MP2,MP101,MP112", ".")
    assert result.exit_code == 0 and _hint(result.output) == []


def test_a_notebook_counts_too(project: Path):
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": LAYER.splitlines(keepends=True)}]
    (project / "demo.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                    "nbformat_minor": 5}, indent=1))
    (project / "loop.py").write_text(LOOP)  # parsed for MP102: the full path, not the trigger table's answer
    meta = json.loads(mpfix("check", "--no-cache", "--format", "json-run", ".").output)["run"]["float16Unchecked"]
    assert sorted(Path(p).name for p in meta["paths"]) == ["demo.ipynb", "loop.py"]


def test_a_run_the_trigger_table_answers_says_it_too(project: Path):
    # Only a float16 rule's trigger, and no float16 anywhere: mpfix answers without parsing (or importing
    # the rules, mpfix.trigger_table); the hint comes from the same table.
    (project / "layers.py").write_text(LAYER)
    probe = ("import sys\nfrom mpfix.cli import main\nsys.argv = ['mpfix', 'check', '.']\n"
             "try:\n    main()\nexcept SystemExit as exit:\n    print('exit', exit.code)\n"
             "print('libcst imported:', 'libcst' in sys.modules)\n")
    # Twice: in a checkout whose packaged table is stale, the first run leaves one in the cache folder.
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=project)
    assert "exit 0" in done.stdout and "libcst imported: False" in done.stdout, done.stdout + done.stderr
    (hint,) = _hint(done.stdout)
    assert hint.startswith("1 file was not checked for float16")


@pytest.mark.parametrize("parsed", [False, True], ids=["trigger-table", "parsed"])
def test_per_file_ignores_of_the_float16_rules_leave_a_file_out(project: Path, parsed: bool):
    (project / "pyproject.toml").write_text("[project]\nname = 'demo'\n\n[tool.mpfix]\n"
                                            "per-file-ignores = { \"legacy/*\" = [\"MP2\"] }\n")
    (project / "legacy").mkdir()
    (project / "legacy" / "layers.py").write_text(LAYER)
    (project / "layers.py").write_text(LAYER)
    if parsed:
        (project / "loop.py").write_text(LOOP)
    meta = json.loads(mpfix("check", "--no-cache", "--format", "json-run", ".").output)["run"]["float16Unchecked"]
    expected = ["layers.py", "loop.py"] if parsed else ["layers.py"]
    assert sorted(str(Path(p).relative_to(project)) for p in meta["paths"]) == expected


@pytest.mark.parametrize("value", ["mixed_float16", "float32"])
def test_no_hint_from_a_warm_cache_when_a_policy_is_configured(library: Path, value: str):
    runs = [mpfix("check", "--policy", value, ".") for _ in range(2)]
    assert [_hint(r.output) for r in runs] == [[], []]
    assert runs[0].output == runs[1].output
