"""C32: a file's own use of an API only one Keras generation has is evidence for its target.

tensorflow/models research/seq_flow_lite/trainer_v2.py uses ``tf.estimator`` (removed in TF 2.16)
and ``tf.keras.metrics.Mean(...).reset_states()`` (Keras 2 only): it cannot run on the Keras 3
installed next to mpfix, so that installation decides nothing for it. Before, MP101's fix wrote
Keras 3's ``optimizer.scale_loss`` into it (an AttributeError on the TF 2.15 it runs on).
"""

from __future__ import annotations

import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from mpfix import target
from mpfix.engine import Engine, Options
from mpfix.selection import select

# The shape of trainer_v2.py (C32), shortened.
TRAINER = textwrap.dedent('''
    import tensorflow as tf

    def main(model, train_ds):
        optimizer = tf.keras.optimizers.Adam()
        train_loss = tf.keras.metrics.Mean(name="train_loss")

        @tf.function
        def train_step(features):
            with tf.GradientTape() as tape:
                logits = model(features["x"], training=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["y"], logits=logits))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            train_loss(loss)

        for epoch in range(2):
            {reset}
            for features in train_ds:
                train_step(features)
    ''').lstrip()


def _fake_versions(monkeypatch, versions: dict[str, str]) -> None:
    def version(dist):
        if dist in versions:
            return versions[dist]
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(target.metadata, "version", version)
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    target.installed_generation.cache_clear()


@pytest.fixture(autouse=True)
def _clear_cache():
    yield
    target.installed_generation.cache_clear()


def _lint(tmp_path: Path, text: str, fix: bool = True):
    path = tmp_path / "proj" / "trainer_v2.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    engine = Engine(select(("MP101",), ()), Options(keras="auto", policy="mixed_float16", unsafe_fixes=True,
                                                    project_policy=False))
    return engine.lint(text, path, fix=fix)


@pytest.mark.parametrize("reset", ["train_loss.reset_states()", "tf.estimator.ModeKeys.TRAIN",
                                   "tf.keras.layers.experimental.preprocessing.Rescaling(1.0)",
                                   "tf.keras.optimizers.legacy.SGD()"])
def test_keras2_only_api_in_the_file_withholds_the_keras3_fix(tmp_path, monkeypatch, reset):
    _fake_versions(monkeypatch, {"tensorflow": "2.21.0"})
    text = TRAINER.format(reset=reset)
    result = _lint(tmp_path, text)
    assert [f.code for f in result.findings] == ["MP101"], "the finding itself stays"
    assert result.findings[0].fix is None and "keras = 2" in result.findings[0].message
    assert result.fixed_text is None or "scale_loss" not in result.fixed_text


def test_keras2_only_api_with_keras2_installed_or_nothing_gives_the_keras2_fix(tmp_path, monkeypatch):
    text = TRAINER.format(reset="train_loss.reset_states()")
    for versions in ({"tensorflow": "2.15.0"}, {}):
        _fake_versions(monkeypatch, versions)
        decided = target.decide("auto", text, None)
        assert decided.keras == 2, decided
        fixed = _lint(tmp_path, text).fixed_text
        assert fixed is not None and "get_scaled_loss" in fixed and "scale_loss(loss)" not in fixed.replace(
            "get_scaled_loss(loss)", "")


def test_reset_states_of_a_layer_decides_nothing(tmp_path, monkeypatch):
    """Keras 3 RNN layers have reset_states too: the Keras 3 fix stays."""
    _fake_versions(monkeypatch, {"tensorflow": "2.21.0"})
    text = TRAINER.format(reset="rnn.reset_states()").replace(
        'train_loss = tf.keras.metrics.Mean(name="train_loss")',
        'rnn = tf.keras.layers.LSTM(4, stateful=True)\n    train_loss = tf.keras.metrics.Mean(name="train_loss")')
    assert target.decide("auto", text, None).keras == 3
    fixed = _lint(tmp_path, text).fixed_text
    assert fixed is not None and "optimizer.scale_loss(loss)" in fixed


def test_a_declaration_still_wins_over_the_files_evidence(tmp_path, monkeypatch):
    _fake_versions(monkeypatch, {"tensorflow": "2.21.0"})
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "requirements.txt").write_text("tensorflow>=2.16\n")
    decided = target.decide("auto", TRAINER.format(reset="train_loss.reset_states()"), tmp_path / "proj" / "t.py")
    assert decided.keras == 3 and "installed" not in decided.reason, decided


def test_apis_of_both_generations_decide_nothing(monkeypatch):
    _fake_versions(monkeypatch, {})
    text = TRAINER.format(reset="train_loss.reset_states()") + "\nx = keras.ops.ones(3)\n"
    decided = target.decide("auto", text, None)
    assert decided.keras is None and "Keras 3 only" in decided.reason and "Keras 2 only" in decided.reason


def test_hostile_dotted_chain_stays_linear():
    text = "a" + ".a" * 200_000 + ".reset_states(\n"
    assert target.file_evidence(text, 2) is None


@pytest.mark.slow
def test_every_keras2_only_row_holds_on_the_installed_tensorflow():
    """The rows are facts of TF 2.16+/Keras 3 and tf_keras, checked here, not assumed."""
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    tf_keras = pytest.importorskip("tf_keras")
    assert int(keras.__version__.split(".")[0]) == 3
    rows = {row.api: row for row in target.FILE_EVIDENCE}
    assert set(rows) == {"keras.ops / keras.config", "tf.estimator", "keras.backend.set_learning_phase",
                         "keras.layers.experimental", "keras.optimizers.legacy", "Metric.reset_states"}
    assert not hasattr(keras.layers, "experimental") and hasattr(tf_keras.layers.experimental, "preprocessing")
    with pytest.raises(ImportError):
        keras.optimizers.legacy.Adam()
    tf_keras.optimizers.legacy.Adam()
    assert not hasattr(tf, "estimator") and not hasattr(tf.compat.v1, "estimator")
    assert not hasattr(keras.backend, "set_learning_phase") and hasattr(tf_keras.backend, "set_learning_phase")
    assert not hasattr(keras.metrics.Mean(), "reset_states") and hasattr(tf_keras.metrics.Mean(), "reset_states")
    assert hasattr(keras.layers.LSTM(2, stateful=True), "reset_states")  # why a receiver must be a metric
    assert hasattr(keras, "ops") and hasattr(keras, "config") and not hasattr(tf_keras, "ops")


def test_uses_are_matched_to_bindings_in_one_pass(monkeypatch):
    """A file of 20,000 distinct ``aN.reset_states()`` took 154 s: each use searched the whole text for
    its own binding (a hang in check on hostile input). The text is now scanned once for uses and once
    for bindings, whatever their number: no per-use search."""
    searches = []
    real_search = target.re.search

    def counting(*args, **kwargs):
        searches.append(args[0])
        return real_search(*args, **kwargs)

    monkeypatch.setattr(target.re, "search", counting)
    uses = "".join(f"a{i}.reset_states()\n" for i in range(2_000))
    assert target.file_evidence("import tensorflow as tf\n" + uses, 2) is None
    assert target.file_evidence("import tensorflow as tf\n" + uses + "a1999 = tf.keras.metrics.Mean()\n", 2) \
        == "Metric.reset_states"
    assert len(searches) <= 2, len(searches)
