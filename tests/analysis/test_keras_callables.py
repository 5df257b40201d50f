"""A module function whose callers in another file hand it a callable that runs a project Keras model
(``lambda x: self._model(x, training=False)``, ``self._model.call``): calls of that parameter return the model's
compute dtype (``ArgKind.KERAS_CALLABLE``; research DELF's export_local_model.py hands ``ExtractLocalFeatures`` such
a lambda, research miss N20, whose caller is not in the research corpus).

Ran (TF 2.21 CPU, Keras 3.15.1, mixed_float16): ``extract.py``'s concat raises "cannot compute ConcatV2 as input
#1(zero-based) was expected to be a float tensor but is a half tensor".
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix import policy as policies
from mpfix.engine import Options
from mpfix.project import facts as project_facts
from mpfix.project.crosscall_records import ArgKind
from mpfix.codemods import all_rules
from mpfix.runner import Job, Mode, process_all

from .project_fixtures import _fresh, project  # noqa: F401  (fixtures)

EXTRACT = textwrap.dedent("""
    import tensorflow as tf

    FEATURE_DEPTH = 64


    def extract_local_features(image, image_scales, attention_model_fn):
        output_features = tf.zeros([0, FEATURE_DEPTH], dtype=tf.float32)
        output_scores = tf.zeros([0], dtype=tf.float32)
        for scale in image_scales:
            size = tf.cast(tf.cast(tf.shape(image)[1:3], tf.float32) * scale, tf.int32)
            attention_prob, feature_map = attention_model_fn(tf.image.resize(image, size))
            features = tf.reshape(feature_map, [-1, FEATURE_DEPTH])
            scores = tf.reshape(attention_prob, [-1])
            output_features = tf.concat([output_features, features], 0)
            output_scores = tf.concat([output_scores, scores], 0)
        return output_features, output_scores
""").lstrip("\n")
MODEL = textwrap.dedent("""
    import keras


    class Delf(keras.Model):
        def __init__(self):
            super().__init__()
            self.backbone = keras.layers.Conv2D(64, 3, strides=4, activation="relu")
            self.attention = keras.layers.Conv2D(1, 1, activation="softplus"{dtype})

        def call(self, images, training=False):
            features = self.backbone(images)
            return self.attention(features), features
""").lstrip("\n")
EXPORT = textwrap.dedent("""
    import keras
    import tensorflow as tf

    from pkg import delf_model, extract


    class ExtractModule(tf.Module):
        def __init__(self):
            super().__init__()
            self._model = {model}

        def run(self, image):
            return extract.extract_local_features(image, [1.0, 0.5], {callable})


    if __name__ == "__main__":
        keras.mixed_precision.set_global_policy("mixed_float16")
        module = ExtractModule()
        print(module.run(tf.random.uniform([1, 64, 64, 3]))[0].dtype)
""").lstrip("\n")
LAMBDA = "lambda x: self._model(x, training=False)"


def _write(root: Path, callable_: str = LAMBDA, model: str = "delf_model.Delf()", dtype: str = "") -> None:
    files = {"pkg/__init__.py": "", "pkg/extract.py": EXTRACT, "pkg/delf_model.py": MODEL.format(dtype=dtype),
             "export.py": EXPORT.format(model=model, callable=callable_)}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _check(root: Path, cache: bool = False) -> list[str]:
    job = Job(rule_codes=("MP206",), options=Options(keras="3"), mode=Mode.CHECK)
    results = process_all(sorted(p for p in root.rglob("*.py") if ".mpfix_cache" not in p.parts), job, jobs=1,
                          cache=cache)
    return sorted(f"{r.path.relative_to(root).as_posix()}:{f.line}:{f.code}" for r in results for f in r.findings)


def _kinds(root: Path) -> dict[str, ArgKind]:
    calls = project_facts.file_facts(root / "pkg" / "extract.py").cross_calls
    return {name: kind for call in calls for name, kind in call.args}


@pytest.mark.parametrize("callable_", [LAMBDA, "self._model.call", "lambda x: self._model(x)"])
def test_a_callable_of_a_project_model_handed_on_returns_float16(project, callable_):
    _write(project, callable_)
    assert _kinds(project)["attention_model_fn"] is ArgKind.KERAS_CALLABLE
    assert _check(project) == ["pkg/extract.py:14:MP206", "pkg/extract.py:15:MP206"]


def test_the_fact_is_in_the_cache_key(project):
    _write(project)
    assert _check(project, cache=True) == ["pkg/extract.py:14:MP206", "pkg/extract.py:15:MP206"]
    (project / "export.py").write_text(EXPORT.format(model="delf_model.Delf()",
                                                     callable="lambda x: (tf.zeros([1]), tf.zeros([1, 64]))"))
    policies.forget_projects()
    assert _check(project, cache=True) == []


@pytest.mark.parametrize("model, callable_", [
    ("delf_model.Delf()", "lambda x: tf.cast(x, tf.float32)"),  # not the model
    ("object()", LAMBDA),  # not a Keras class
    ("delf_model.Delf() if tf.executing_eagerly() else None", LAMBDA),  # not a construction
])
def test_a_callable_that_does_not_run_a_project_model_is_no_evidence(project, model, callable_):
    _write(project, callable_, model)
    assert _kinds(project).get("attention_model_fn") is not ArgKind.KERAS_CALLABLE
    assert _check(project) == []


def test_a_model_that_spells_float32_may_return_float32(project):
    _write(project, dtype=', dtype="float32"')
    assert _kinds(project).get("attention_model_fn") is not ArgKind.KERAS_CALLABLE
    assert _check(project) == []


# -- the closure DELF loops: run once, then by tf.while_loop, on float32 accumulators -------------------------
LOOPED = textwrap.dedent("""
    import tensorflow as tf

    FEATURE_DEPTH = 64


    def extract_local_features(image, image_scales, attention_model_fn):
        def _process_single_scale(scale_index, features, scores):
            scale = tf.gather(image_scales, scale_index)
            size = tf.cast(tf.cast(tf.shape(image)[1:3], tf.float32) * scale, tf.int32)
            attention_prob, feature_map = attention_model_fn(tf.image.resize(image, size))
            selected_features = tf.reshape(feature_map, [-1, FEATURE_DEPTH])
            selected_scores = tf.reshape(attention_prob, [-1])
            features = tf.concat([features, selected_features], 0)
            scores = tf.concat([scores, selected_scores], 0)
            return scale_index + 1, features, scores

        output_features = tf.zeros([0, FEATURE_DEPTH], dtype={dtype})
        output_scores = tf.zeros([0], dtype={dtype})
        {first}
        i = tf.constant(1, dtype=tf.int32)
        num_scales = tf.shape(image_scales)[0]
        keep_going = lambda j, f, s: tf.less(j, num_scales)
        _, output_features, output_scores = tf.while_loop(
            cond=keep_going, body=_process_single_scale, loop_vars=[i, output_features, output_scores])
        return output_features, output_scores
""").lstrip("\n")
FIRST = "_, output_features, output_scores = _process_single_scale(0, output_features, output_scores)"


def _looped(root: Path, dtype: str = "tf.float32", first: str = FIRST) -> None:
    _write(root)
    (root / "pkg" / "extract.py").write_text(LOOPED.format(dtype=dtype, first=first))


@pytest.mark.parametrize("first", [FIRST, "pass"])
def test_a_looped_closure_gets_its_loop_variables(project, first):
    # Ran (TF 2.21 CPU, Keras 3, mixed_float16): the first call's concat raises "cannot compute ConcatV2 as input
    # #1(zero-based) was expected to be a float tensor but is a half tensor" (research DELF's ExtractLocalFeatures).
    _looped(project, first=first)
    assert _check(project) == ["pkg/extract.py:13:MP206", "pkg/extract.py:14:MP206"]


def test_float16_accumulators_are_no_mix(project):
    _looped(project, dtype="tf.float16")
    assert _check(project) == []


def test_a_closure_also_handed_elsewhere_keeps_its_parameters_unknown(project):
    _looped(project, first="tf.nest.map_structure(print, _process_single_scale)")
    assert _check(project) == []
