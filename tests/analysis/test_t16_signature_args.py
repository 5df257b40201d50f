"""A ``tf.function``'s ``input_signature`` float32 parameter handed to another file's function, beside a callable
that runs a project Keras model: the callee compares the model's float16 output with it (research DELF, N22:
export_local_model.py's ``tf.Module`` method ``ExtractFeatures`` passes ``input_abs_thres``, a
``TensorSpec((), tf.float32)``, and ``lambda x: self._model(x, training=False)`` to export_model_utils.py's
``ExtractLocalFeatures``, whose closure ``_ProcessSingleScale`` computes ``attention_prob >= abs_thres``).

Facts: a parameter typed float32 by its function's ``input_signature`` (never rebound there) is passed on as
``ArgKind.FLOAT32`` (``mpfix.project.signatures``); a call from anywhere that hands a function a Keras instance or
a callable running one decides the function's other parameters too (``dtype_arguments._cross_file_arguments``),
read directly and from a closure of the function.

Ran (TF 2.21 CPU, Keras 3.15.1, mixed_float16, this project with ``Module().run(...)``): the closure's and the flat
``attention_prob >= abs_thres`` raise "TypeError: Input 'y' of 'GreaterEqual' Op has type float32 that does not match
type float16 of argument 'x'". With a float16 threshold (a float16 signature, a cast first) the comparison runs and the
float32 accumulator's concat raises next (reported at its own line, N20's class); with the callee's cast of the scores
to float32, or a model with a float32 head, it all runs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix import policy as policies
from mpfix.engine import Options
from mpfix.project import facts as project_facts
from mpfix.project.crosscall_records import ArgKind
from mpfix.runner import Job, Mode, process_all

from .project_fixtures import _fresh, project  # noqa: F401  (fixtures)

EXTRACT = textwrap.dedent("""
    import tensorflow as tf


    def extract_scales(image, scales, abs_thres, attention_model_fn):
        def _process_single_scale(scale_index, scores):
            scale = tf.gather(scales, scale_index)
            size = tf.cast(tf.cast(tf.shape(image)[1:3], tf.float32) * scale, tf.int32)
            attention_prob = {attention}
            attention_prob = tf.reshape(attention_prob, [-1])
            indices = tf.reshape(tf.where(attention_prob >= abs_thres), [-1])
            scores = tf.concat([scores, tf.gather(attention_prob, indices)], 0)
            return scale_index + 1, scores

        return _process_single_scale(0, tf.zeros([0], dtype=tf.float32))


    def extract_flat(image, abs_thres, attention_model_fn):
        attention_prob = attention_model_fn(image)
        return tf.where(attention_prob >= abs_thres)
""").lstrip("\n")
ATTENTION = "attention_model_fn(tf.image.resize(image, size))"
MODEL = textwrap.dedent("""
    import keras


    class Attention(keras.Model):
        def __init__(self):
            super().__init__()
            self.backbone = keras.layers.Conv2D(8, 3, strides=4, activation="relu")
            self.attention = keras.layers.Conv2D(1, 1, activation="softplus"{dtype})

        def call(self, images, training=False):
            return self.attention(self.backbone(images))
""").lstrip("\n")
EXPORT = textwrap.dedent("""
    import keras
    import tensorflow as tf

    from pkg import attention_model, extract


    class ExtractModule(tf.Module):
        def __init__(self):
            super().__init__()
            self._model = attention_model.Attention()

        {decorator}
        def run(self, image, scales, input_abs_thres):
            {body}
            return (extract.extract_scales(image, scales, {passed}, lambda x: self._model(x, training=False)),
                    extract.extract_flat(image, {passed}, lambda x: self._model(x, training=False)))


    if __name__ == "__main__":
        keras.mixed_precision.set_global_policy("mixed_float16")
        module = ExtractModule()
        print(module.run(tf.random.uniform([1, 64, 64, 3]), tf.constant([1.0, 0.5]), tf.constant(0.5)))
""").lstrip("\n")
SPEC = 'tf.TensorSpec(shape=(), dtype=tf.float32, name="abs_thres")'
SIGNATURE = """@tf.function(input_signature=[
            tf.TensorSpec(shape=[1, None, None, 3], dtype=tf.float32, name="image"),
            tf.TensorSpec(shape=[None], dtype=tf.float32, name="scales"),
            {spec},
        ])"""
COMPARED = ["pkg/extract.py:10:MP206", "pkg/extract.py:19:MP206"]  # the closure's comparison and the flat one
CONCAT = ["pkg/extract.py:11:MP206"]  # float16 scores into a float32 accumulator (N20's class)
FOUND = sorted(COMPARED + CONCAT)


def _export(spec: str = SPEC, passed: str = "input_abs_thres", body: str = "pass",
            decorator: str = SIGNATURE) -> str:
    return EXPORT.format(decorator=decorator.format(spec=spec), passed=passed, body=body)


def _write(root: Path, export: str | None = None, attention: str = ATTENTION, dtype: str = "") -> None:
    files = {"pkg/__init__.py": "", "pkg/extract.py": EXTRACT.format(attention=attention),
             "pkg/attention_model.py": MODEL.format(dtype=dtype), "export.py": export or _export()}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _check(root: Path, cache: bool = False) -> list[str]:
    job = Job(rule_codes=("MP206",), options=Options(keras="3"), mode=Mode.CHECK)
    results = process_all(sorted(p for p in root.rglob("*.py") if ".mpfix_cache" not in p.parts), job, jobs=1,
                          cache=cache)
    return sorted(f"{r.path.relative_to(root).as_posix()}:{f.line}:{f.code}" for r in results for f in r.findings)


def _kinds(root: Path, function: str = "extract_flat") -> dict[str, ArgKind]:
    calls = project_facts.file_facts(root / "pkg" / "extract.py").cross_calls
    return {name: kind for call in calls if call.function == function for name, kind in call.args}


@pytest.mark.parametrize("spec", [SPEC, "tf.TensorSpec((), tf.float32)", "tf.TensorSpec([])",
                                  'tf.TensorSpec(shape=(), dtype="float32")'])
def test_an_input_signature_float32_parameter_meets_the_models_float16_output(project, spec):
    _write(project, _export(spec=spec))
    assert _kinds(project)["abs_thres"] is ArgKind.FLOAT32
    assert _kinds(project)["attention_model_fn"] is ArgKind.KERAS_CALLABLE
    assert _kinds(project, "extract_scales")["abs_thres"] is ArgKind.FLOAT32
    assert _check(project) == FOUND  # the closure's comparison and the flat one


def test_the_same_files_call_sites_pass_it_as_float32_too(project):
    _write(project)
    text = (project / "pkg" / "extract.py").read_text()
    (project / "pkg" / "extract.py").write_text(text.replace("import tensorflow as tf\n", textwrap.dedent("""
        import tensorflow as tf

        from pkg import attention_model
    """).lstrip("\n"), 1) + textwrap.dedent("""


        class Local(tf.Module):
            def __init__(self):
                self._model = attention_model.Attention()

            @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 3]), tf.TensorSpec(())])
            def run(self, image, thres):
                return extract_flat(image, thres, lambda x: self._model(x))
    """))
    (project / "export.py").write_text(_export().replace("extract.extract_flat(image, input_abs_thres, ", "("))
    assert _kinds(project)["abs_thres"] is ArgKind.FLOAT32  # the one call of extract_flat: this file's
    assert "pkg/extract.py:21:MP206" in _check(project)


@pytest.mark.parametrize("export", [
    _export(passed="tf.cast(input_abs_thres, tf.float16)"),  # the caller casts to the compute dtype first
    _export(spec='tf.TensorSpec(shape=(), dtype=tf.float16, name="abs_thres")'),  # a float16 signature
    _export(spec='tf.TensorSpec(shape=(), dtype=tf.float16)'),
    _export(body="input_abs_thres = tf.cast(input_abs_thres, tf.float16)"),  # rebound before it is passed
    _export(passed="thres", body="thres = tf.cast(input_abs_thres, self._model.compute_dtype)"),
    _export(decorator="@tf.function"),  # no signature: the parameter is whatever the caller passes
    _export(decorator="@tf.function(reduce_retracing=True)"),
])
def test_a_threshold_that_is_not_certainly_float32_is_no_mix(project, export):
    _write(project, export)
    assert _kinds(project).get("abs_thres") is not ArgKind.FLOAT32
    assert _check(project) == CONCAT  # the comparisons are silent


def test_a_model_with_a_float32_head_returns_float32(project):
    _write(project, dtype=', dtype="float32"')
    assert _kinds(project).get("attention_model_fn") is not ArgKind.KERAS_CALLABLE
    assert _check(project) == []


def test_the_callee_casting_the_scores_to_float32_is_no_mix(project):
    _write(project, attention=f"tf.cast({ATTENTION}, tf.float32)")
    text = (project / "pkg" / "extract.py").read_text()
    (project / "pkg" / "extract.py").write_text(
        text.replace("attention_prob = attention_model_fn(image)",
                     "attention_prob = tf.cast(attention_model_fn(image), tf.float32)"))
    assert _kinds(project)["abs_thres"] is ArgKind.FLOAT32
    assert _check(project) == []


def test_a_second_caller_that_passes_an_unknown_threshold_leaves_it_unknown(project):
    _write(project)
    (project / "other.py").write_text(textwrap.dedent("""
        import tensorflow as tf

        from pkg import attention_model, extract


        class Other(tf.Module):
            def __init__(self, thres):
                self._model = attention_model.Attention()
                self._thres = thres

            def run(self, image):
                return extract.extract_flat(image, self._thres, lambda x: self._model(x))


        if __name__ == "__main__":
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            print(Other(0.5).run(tf.random.uniform([1, 64, 64, 3])))
    """).lstrip("\n"))
    assert _check(project) == ["pkg/extract.py:10:MP206", "pkg/extract.py:11:MP206"]  # extract_scales has one caller


def test_the_signature_in_the_cache_key(project):
    """A cached run and a --no-cache run agree after the OTHER file (the caller's signature) changes."""
    _write(project)
    assert _check(project, cache=True) == FOUND
    (project / "export.py").write_text(_export(spec="tf.TensorSpec(shape=(), dtype=tf.float16)"))
    policies.forget_projects()
    project_facts.forget()
    cached = _check(project, cache=True)
    policies.forget_projects()
    project_facts.forget()
    assert cached == _check(project, cache=False) == CONCAT
