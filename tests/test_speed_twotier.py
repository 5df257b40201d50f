"""The per-rule gate before the LibCST parse (``mpfix.prechecks``, ``Rule.needs``, ``Engine._gated``).

Each layer can fail on its own:
  * each need has a snippet where its rule fires and the need holds, and one a single change away where the
    need fails and the rule (run with the gate off) finds nothing;
  * every rule that declares a need fires only where it holds (its INVALID examples, both generations);
  * over the repository's own scripts (samples, held-out scripts, rule fixtures, verify scripts), under the
    project's policy and under ``mixed_float16``: every rule the gate drops in a file finds nothing there with
    the gate off, and the gate changes no finding of the whole check;
  * the engine drops only the rules whose needs fail, parses for the others with the same context, and keeps
    every rule in a fix unless none is left.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix import engine as engine_module
from mpfix import prechecks
from mpfix.codemods import all_rules
from mpfix.codemods.base import Need
from mpfix.engine import Engine, Options
from mpfix.project.facts import file_facts
from mpfix.testing import lint_snippet

from script_projects import copied_scripts

ROOT = Path(__file__).resolve().parent.parent

HEAD = """
import tensorflow as tf

model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
"""
SCALED = """
import tensorflow as tf
import tf_keras

opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))


def train_step(x, y):
    with tf.GradientTape() as tape:
        scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = [g / opt.loss_scale for g in grads]
    grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(zip(grads, model.trainable_variables))
"""
EXPERIMENTAL = """
import tensorflow as tf

tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
"""

# (need, rule, keras, code that fires, the same code where the need fails)
CASES = [
    (Need.OUTPUT_HEAD, "MP205", 2, HEAD, HEAD.replace('activation="softmax")', 'activation="softmax", dtype="float32")')),
    (Need.OUTPUT_HEAD, "MP205", 2, HEAD.replace("tf.keras.layers.Dense(", "Head(").replace(
        "import tensorflow as tf", "import tensorflow as tf\nfrom tensorflow.keras.layers import Dense as Head"),
     HEAD.replace("tf.keras.layers.Dense(", "Head(").replace(
        "import tensorflow as tf", "import tensorflow as tf\nfrom tensorflow.keras.layers import Flatten as Head")),
    (Need.SCALE_CALL, "MP110", 2, SCALED, SCALED.replace("opt.get_scaled_loss(loss_fn(y, model(x)))", "loss_fn(y, model(x))")),
    (Need.MIXED_PRECISION_API, "MP301", 2, EXPERIMENTAL,
     EXPERIMENTAL.replace("tf.keras.mixed_precision.experimental.set_policy", "tf.keras.experimental.set_policy")),
]


def _found(code: str, rule: str, keras: int, filename: str = "snippet.py") -> list:
    return [f for f in lint_snippet(code, rule, keras=keras, policy="mixed_float16", filename=filename).findings
            if f.code == rule]


@pytest.mark.parametrize("need, rule, keras, fires, fails", CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_each_need_holds_where_its_rule_fires_and_fails_where_it_cannot(need, rule, keras, fires, fails, monkeypatch):
    fires, fails = textwrap.dedent(fires).lstrip("\n"), textwrap.dedent(fails).lstrip("\n")
    assert _found(fires, rule, keras), f"{rule}: the case no longer fires (it tests nothing)"
    assert prechecks.held(fires, Path("snippet.py"), {need}) == {need}
    assert prechecks.held(fails, Path("snippet.py"), {need}) == frozenset()
    monkeypatch.setattr(engine_module, "GATE", False)
    assert not _found(fails, rule, keras), f"{rule} fires where {need} fails: the need is not looser than the rule"


def test_mp205_needs_no_test_code(monkeypatch):
    code = textwrap.dedent(HEAD).lstrip("\n")
    assert prechecks.held(code, Path("tests/model_test.py"), {Need.OUTPUT_HEAD}) == frozenset()
    monkeypatch.setattr(engine_module, "GATE", False)
    assert not _found(code, "MP205", 2, filename="tests/model_test.py")


def test_a_text_cpython_rejects_keeps_every_rule():
    assert prechecks.held("def f(:\n", Path("m.py"), {Need.OUTPUT_HEAD, Need.SCALE_CALL}) is None


def _declaring() -> list:
    return [r for r in all_rules() if r.needs]


@pytest.mark.parametrize("rule", _declaring(), ids=lambda r: r.code)
def test_a_declaring_rule_fires_only_where_its_needs_hold(rule, monkeypatch):
    monkeypatch.setattr(engine_module, "GATE", False)
    fired = 0
    for example in rule.INVALID:
        code = textwrap.dedent(example.code).lstrip("\n")
        for keras in ([example.keras] if example.keras else rule.keras_generations):
            if any(f.code == rule.code for f in lint_snippet(code, rule.code, keras=keras, policy=example.policy).findings):
                fired += 1
                assert prechecks.held(code, Path("snippet.py"), rule.needs) == rule.needs, rule.code
    assert fired


def _key(result) -> list:
    return [(f.code, f.start, f.end, f.message) for f in result.findings] + [e.message for e in result.errors]


@pytest.mark.parametrize("policy", [None, "mixed_float16"])
def test_every_dropped_rule_finds_nothing_in_the_scripts(tmp_path, monkeypatch, policy):
    from mpfix import policy as policies

    policies.forget_projects()
    policies.use_store(None)
    paths = copied_scripts(tmp_path)
    assert len(paths) > 100
    rules = all_rules()
    engine = Engine(rules, Options(policy=policy))
    dropped = 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        selected = engine._candidates(text, path, ())
        needs = frozenset().union(*(r.needs for r in selected))
        if not needs:
            continue
        try:
            held = prechecks.held(text, path, needs, file_facts(path, consult_project=policy is None).cross_calls)
        except RecursionError:
            continue
        gone = [r for r in selected if held is not None and not r.needs <= held]
        monkeypatch.setattr(engine_module, "GATE", False)
        for rule in gone:
            dropped += 1
            assert not Engine((rule,), Options(policy=policy)).lint(text, path).findings, (path.name, rule.code)
        ungated = _key(engine.lint(text, path))
        monkeypatch.setattr(engine_module, "GATE", True)
        assert _key(engine.lint(text, path)) == ungated, path.name
    assert dropped, "the gate dropped no rule in any script: the test checks nothing"
    policies.forget_projects()


def test_the_engine_drops_only_rules_whose_needs_fail(monkeypatch):
    by_code = {r.code: r for r in all_rules()}
    code = textwrap.dedent(HEAD).lstrip("\n") + "\nclass Block(tf.keras.layers.Layer):\n    def call(self, x):\n" \
        "        return x * tf.cast(2.0, tf.float32)\n"
    rules = [by_code["MP205"], by_code["MP206"], by_code["MP110"], by_code["MP301"]]
    engine = Engine(tuple(rules), Options(policy="mixed_float16", project_policy=False))
    kept, checked = engine._gated(code, Path("m.py"), rules)
    assert checked and [r.code for r in kept] == ["MP205", "MP206"]
    kept, _ = engine._gated(code, Path("m.py"), rules, fix=True)
    assert kept == rules  # a fix keeps every rule: the fixed text may hold a need
    kept, _ = engine._gated(code, Path("tests/m_test.py"), [by_code["MP205"], by_code["MP110"]], fix=True)
    assert kept == []  # none left: not parsed, in a fix too
    result = engine.lint(code, Path("m.py"))
    assert {f.code for f in result.findings} == {"MP205", "MP206"}
    monkeypatch.setattr(engine_module, "GATE", False)
    assert _key(engine.lint(code, Path("m.py"))) == _key(result)
    assert engine._gated(code, Path("m.py"), rules) == (rules, False)


def test_only_a_float16_region_asks_for_the_project_facts(monkeypatch):
    """The pool's early helpers check files before the project pass ends; a gate that asked every file for its
    project facts made each helper compute them again (a5b8ceb: +2.5 s CPU on a pooled tf-models check)."""
    by_code = {r.code: r for r in all_rules()}
    code = textwrap.dedent(HEAD).lstrip("\n") + "\noptimizer.apply_gradients(zip(grads, variables))\n"
    asked = []
    monkeypatch.setattr(engine_module, "file_facts", lambda path, **kw: asked.append(path) or file_facts(path, **kw))
    rules = [by_code["MP110"], by_code["MP301"], by_code["MP205"]]
    engine = Engine(tuple(rules), Options(policy="mixed_float16", project_policy=False))
    engine._gated(code, Path("m.py"), rules)
    assert asked == []
    engine._gated(code, Path("m.py"), [by_code["MP206"]])
    assert asked == [Path("m.py")]
