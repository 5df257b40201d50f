"""No parse where every selected rule belongs to the other Keras generation (``Engine._idle``).

``Engine._visit`` runs a rule only for the generations it lists (MP106 is Keras 3's, MP103 and MP107 Keras 2's).
When the text alone decides the file's generation and no selected rule runs for it, the engine skips the
LibCST parse. Each test below can fail on its own: the skip must happen (the parse is counted), it must not
happen where the text does not decide or a rule runs, and what the engine answers must equal the answer of
a full parse (the gate off), a syntax error included.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mpfix import engine as engine_module
from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

# MP106's shape (an optimizer built outside the strategy scope that builds the model) on Keras 3: MP106 reports it.
KERAS3_SCOPE = (
    "import tensorflow as tf\n"
    "import keras\n\n"
    'keras.mixed_precision.set_global_policy("mixed_float16")\n'
    "strategy = tf.distribute.MirroredStrategy()\n"
    "with strategy.scope():\n"
    "    model = keras.Sequential([keras.layers.Dense(1)])\n"
    "optimizer = keras.optimizers.Adam()\n"
)
# The same in a Keras 2 file (tf_keras imported): MP106, Keras 3's only, does not run there.
KERAS2_SCOPE = KERAS3_SCOPE.replace("import keras", "import tf_keras").replace("keras.", "tf_keras.")


def _mp106() -> tuple:
    return tuple(r for r in all_rules() if r.code == "MP106")


def _lint(text: str, monkeypatch, *, gate: bool = True, keras: str = "auto"):
    """The engine's answer for ``text`` with only MP106 selected, and how many times it parsed."""
    parsed = []
    real = engine_module.parse_module

    def counting(*args, **kwargs):
        parsed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_module, "parse_module", counting)
    monkeypatch.setattr(engine_module, "GATE", gate)
    result = Engine(_mp106(), Options(keras=keras, project_policy=False)).lint(text, Path("train.py"))
    return result, len(parsed)


def test_a_rule_of_the_other_generation_alone_is_not_parsed_for(monkeypatch):
    assert _mp106()[0].keras_generations == (3,)
    result, parses = _lint(KERAS2_SCOPE, monkeypatch)
    assert parses == 0
    full, full_parses = _lint(KERAS2_SCOPE, monkeypatch, gate=False)
    assert full_parses == 1
    assert result.findings == full.findings == [] and result.errors == full.errors == []


def test_a_rule_that_runs_for_the_generation_is_parsed_for(monkeypatch):
    result, parses = _lint(KERAS3_SCOPE, monkeypatch, keras="3")
    assert parses == 1
    assert [f.code for f in result.findings] == ["MP106"]


def test_a_configured_generation_decides_as_the_parse_would(monkeypatch):
    # keras = 2 configured and no tf_keras import: Keras 2, MP106 idle, no parse and no finding.
    result, parses = _lint(KERAS3_SCOPE, monkeypatch, keras="2")
    assert parses == 0 and result.findings == []
    full, _ = _lint(KERAS3_SCOPE, monkeypatch, keras="2", gate=False)
    assert full.findings == []


def test_tf_keras_spelled_but_not_imported_leaves_it_to_the_parse(monkeypatch):
    # The text names tf_keras, not in an import line the text's test reads: only the parsed imports can say.
    text = KERAS3_SCOPE.replace("import keras\n", "import keras; import tf_keras\n")
    assert "tf_keras" in text and not engine_module.targets.imports_tf_keras(text)
    result, parses = _lint(text, monkeypatch, keras="3")
    assert parses == 1
    full, _ = _lint(text, monkeypatch, keras="3", gate=False)
    assert [f.code for f in result.findings] == [f.code for f in full.findings]


@pytest.mark.parametrize("broken", ["    return 1\n", "x = 1 +\n"])
def test_a_file_cpython_rejects_is_reported_as_before(monkeypatch, broken):
    text = KERAS2_SCOPE + broken
    result, _ = _lint(text, monkeypatch)
    full, _ = _lint(text, monkeypatch, gate=False)
    assert [(e.line, e.column, e.message) for e in result.errors] == \
        [(e.line, e.column, e.message) for e in full.errors]
    assert result.errors or full.errors == []


def test_fixing_parses_as_before(monkeypatch):
    # apply/diff (fix=True) keep the parse: what they report about the original is the full run's.
    parsed = []
    real = engine_module.parse_module
    monkeypatch.setattr(engine_module, "parse_module", lambda *a, **k: parsed.append(1) or real(*a, **k))
    Engine(_mp106(), Options(project_policy=False)).lint(KERAS2_SCOPE, Path("train.py"), fix=True)
    assert parsed
