"""The gate before the LibCST parse (``mpfix.gate``, ``Rule.needs``): a file it skips can give no finding.

Three layers, each able to fail on its own:
  * every seed condition of ``dtype_regions.RegionFinder`` has a snippet where the real analysis finds a
    region and the gate must not skip (drop a condition from the gate and its case fails), and plain
    modules (properties, dataclasses, helpers) that it does skip, with no region found;
  * over the repository's own scripts (samples, held-out scripts, rule fixtures, verify scripts), under the
    project's policy and under ``mixed_float16``: every file the gate skips has no region in the real
    analysis (both Keras generations), and gives no finding when checked with the gate off;
  * a rule that declares ``Need.FLOAT16_REGION`` fires only in files with a region (its INVALID examples).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from mpfix import engine as engine_module
from mpfix import gate
from mpfix.codemods import all_rules
from mpfix.codemods.analysis.dtypes import DtypeAnalysis
from mpfix.codemods.base import Need
from mpfix.codemods.names import ImportTable
from mpfix.engine import Engine, Options
from mpfix.project.crosscall_records import CallContext, CrossCall
from mpfix.project.facts import ProjectFileFacts, file_facts

from script_projects import copied_scripts

ROOT = Path(__file__).resolve().parent.parent


def _regions(text: str, project=None) -> set[str]:
    """The kinds of the non-module regions the real dtype inference finds (either Keras generation)."""
    module = cst.parse_module(text)
    kinds: set[str] = set()
    for keras in (2, 3):
        analysis = DtypeAnalysis(module, ImportTable(module).resolve, None, keras=keras, project=project)
        kinds |= {r.kind for r in analysis.regions if r.kind != "module"}
    return kinds


IMPORTS = "import functools\nimport tensorflow as tf\nfrom tensorflow import keras\n\n"

# One case per seed condition: (name, code). The real analysis finds a region in each.
SEEDED = [
    ("tf.function", "@tf.function\ndef scaled(x):\n    return x * 2.0\n"),
    ("tf.function called", "@tf.function(jit_compile=True)\ndef scaled(x):\n    return x * 2.0\n"),
    ("tf.function aliased", "from tensorflow import function as compiled\n\n"
                            "@compiled\ndef scaled(x):\n    return x * 2.0\n"),
    ("layer call", "class Block(keras.layers.Layer):\n    def call(self, x):\n        return x * 2.0\n"),
    ("loss __call__", "class FocalLoss:\n    def __call__(self, y_true, logits):\n        return logits * 2.0\n"),
    ("merge hook", "class Mix(keras.layers.Add):\n    def _merge_function(self, inputs):\n"
                   "        return inputs[0] * 2.0\n"),
    ("train_step", "def train_step(images):\n    return images * 2.0\n"),
    ("step by name", "def distributed_step(images):\n    return images * 2.0\n"),
    ("loss by name", "def contrastive_loss(a, b):\n    return a * b\n"),
    ("y_pred", "def score(y_true, y_pred):\n    return y_pred * 2.0\n"),
    ("taped", "def nt_xent(a, b):\n    return a * b\n\n"
              "def fit(model, x, opt):\n    with tf.GradientTape() as tape:\n        value = nt_xent(model(x), x)\n"
              "    return tape.gradient(value, model.trainable_variables)\n"),
    ("handed on by __init__", "def _probability(score):\n    return score * 2.0\n\n"
                              "class Attention(keras.layers.Layer):\n    def __init__(self):\n"
                              "        super().__init__()\n        self.fn = functools.partial(_probability, 1)\n"),
    ("structural", "class Net(keras.Model):\n    def __init__(self):\n        super().__init__()\n"
                   "        self.meta_head = keras.layers.Dense(4)\n\n"
                   "def embed(net, x):\n    return net(x) * net.meta_head.units\n"),
]

# Modules with functions, decorators and classes where no region can grow.
PLAIN = [
    ("helpers", "def add(a, b):\n    return a + b\n"),
    ("property and dataclass", "import dataclasses\n\n@dataclasses.dataclass\nclass Config:\n    size: int = 2\n\n"
                               "    @property\n    def double(self):\n        return self.size * 2\n"),
    ("class with helpers", "class Registry:\n    def __init__(self):\n        self.items = {}\n\n"
                           "    def add(self, key, value):\n        self.items[key] = value\n"),
    ("no def", "x = tf.reduce_sum(tf.square(tf.ones([3])))\n"),
]


@pytest.mark.parametrize("name, code", SEEDED, ids=[n for n, _ in SEEDED])
def test_each_seed_condition_keeps_the_file(name, code):
    text = IMPORTS + code
    assert _regions(text), f"{name}: the analysis finds no region (the case no longer tests its condition)"
    assert not gate.no_region(text), f"{name}: the gate would skip a file with a float16 region"
    assert gate.may_have_region(__import__("ast").parse(text), text), name


@pytest.mark.parametrize("name, code", PLAIN, ids=[n for n, _ in PLAIN])
def test_plain_modules_are_skipped(name, code):
    text = IMPORTS + code
    assert not _regions(text)
    assert gate.no_region(text), f"{name}: no region, yet the gate parses it"


def test_a_cross_file_call_keeps_the_file():
    text = IMPORTS + "def add(a, b):\n    return a + b\n"
    call = CrossCall(function="add", context=CallContext.LAYER_CALL, args=())
    project = ProjectFileFacts(cross_calls=(call,))
    assert gate.no_region(text) and not gate.no_region(text, project.cross_calls)


def test_the_depth_pre_check_still_refuses():
    from mpfix.parsing import TooComplex

    with pytest.raises(TooComplex):
        gate.no_region("x = " + "(" * 300 + ")" * 300 + "\n")


def test_a_syntax_error_is_never_skipped():
    assert not gate.no_region("def add(a, b)\n    return a + b\n")


def _declaring() -> list:
    return [r for r in all_rules() if Need.FLOAT16_REGION in r.needs]


@pytest.mark.parametrize("rule", _declaring(), ids=lambda r: r.code)
def test_a_rule_needing_a_region_fires_only_where_there_is_one(rule, monkeypatch):
    from mpfix.testing import lint_snippet

    monkeypatch.setattr(engine_module, "GATE", False)
    fired = 0
    for example in rule.INVALID:
        for keras in ([example.keras] if example.keras else rule.keras_generations):
            found = [f for f in lint_snippet(example.code, rule.code, keras=keras, policy=example.policy).findings
                     if f.code == rule.code]
            if found:
                fired += 1
                assert _regions(textwrap.dedent(example.code).lstrip("\n")), \
                    f"{rule.code} fires in a file with no float16 region: it must not declare Need.FLOAT16_REGION"
    assert fired


def test_the_engine_drops_the_rules_needing_a_region_where_there_is_none(monkeypatch):
    plain = IMPORTS + PLAIN[0][1]
    options = Options(policy="mixed_float16", project_policy=False)
    undeclared = [r for r in all_rules() if r.requires_float16 and not r.needs]
    assert Engine(tuple(undeclared[:1]), options)._gated(plain, Path("m.py"), undeclared[:1]) == (undeclared[:1], False)
    declaring = _declaring()
    assert declaring
    assert Engine(tuple(declaring), options)._gated(plain, Path("m.py"), declaring) == ([], True)
    assert Engine(tuple(declaring), options)._gated(plain + SEEDED[3][1], Path("m.py"), declaring) == (declaring, True)
    mixed = undeclared[:1] + declaring
    assert Engine(tuple(mixed), options)._gated(plain, Path("m.py"), mixed) == (undeclared[:1], False)  # text decides
    assert Engine(tuple(mixed), options)._gated(plain, Path("m.py"), mixed, fix=True) == (mixed, False)
    monkeypatch.setattr(engine_module, "GATE", False)
    assert Engine(tuple(declaring), options)._gated(plain, Path("m.py"), declaring) == (declaring, False)


@pytest.mark.parametrize("policy", [None, "mixed_float16"])
def test_every_skipped_script_has_no_region_and_no_finding(tmp_path, monkeypatch, policy):
    from mpfix import policy as policies

    policies.forget_projects()
    policies.use_store(None)
    paths = copied_scripts(tmp_path)
    assert len(paths) > 100
    rules = all_rules()
    declared = tuple(r for r in rules if Need.FLOAT16_REGION in r.needs)
    engine = Engine(rules, Options(policy=policy))
    skipped = 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        consult = policy is None
        facts = file_facts(path, consult_project=consult)
        try:
            if not gate.no_region(text, facts.cross_calls):
                continue
        except RecursionError:
            continue
        skipped += 1
        assert not _regions(text, facts), f"{path.name}: skipped by the gate, yet it has a float16 region"
        monkeypatch.setattr(engine_module, "GATE", False)
        for rule in declared:  # each declaring rule alone, and all of them: nothing to find
            assert not Engine((rule,), Options(policy=policy)).lint(text, path).findings, (path.name, rule.code)
        monkeypatch.setattr(engine_module, "GATE", True)
    assert skipped, "the gate skipped no script: the test checks nothing"
    policies.forget_projects()
    del engine
