"""A project Keras model that casts its output to ``self.dtype`` (its variable dtype: float32 under ``mixed_float16``)
does not return the compute dtype: handing it to another file's function (a callable running it, an instance, or a
parameter typed by the attributes only it defines) is no evidence of float16 there.

The three readers of "this Keras class may return float32" (the cross-file scan's ``float32_classes``, structural
typing's ``spells_float32`` across files and ``param_types`` within one) only looked for ``float32`` spelled; a
``self.dtype`` read is the same fact without the word.

Ran (TF 2.21 CPU, Keras 3.15.1, mixed_float16): ``exporter.run(...)`` below runs and returns float32 (the accumulator
concat sees float32 on both sides); mpfix reported MP206 at the concat before. With ``self.compute_dtype`` instead the
concat raises (float32 accumulator, float16 output), and the finding stays.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from mpfix.engine import Options
from mpfix.runner import Job, Mode, process_all

from .project_fixtures import _fresh, project  # noqa: F401  (fixtures)

MODEL = textwrap.dedent("""
    import keras
    import tensorflow as tf


    class Scorer(keras.Model):
        def __init__(self):
            super().__init__()
            self.meta = {{"outputdim": 4}}
            self.dense = keras.layers.Dense(4)

        def call(self, x):
            return tf.cast(self.dense(x), self.{dtype})
""").lstrip("\n")
EXTRACT = textwrap.dedent("""
    import tensorflow as tf


    def collect(images, model_fn):
        out = tf.zeros([0, 4], dtype=tf.float32)
        for image in images:
            out = tf.concat([out, model_fn(image)], 0)
        return out


    def describe(net, images):
        out = tf.zeros([0, net.meta["outputdim"]])
        for image in images:
            out = tf.concat([out, net(image)], 0)
        return out
""").lstrip("\n")
EXPORT = textwrap.dedent("""
    import keras
    import tensorflow as tf

    from pkg import extract, model


    class Exporter(tf.Module):
        def __init__(self):
            super().__init__()
            self._model = model.Scorer()

        def run(self, images):
            return extract.collect(images, lambda x: self._model(x))


    if __name__ == "__main__":
        keras.mixed_precision.set_global_policy("mixed_float16")
        exporter = Exporter()
        print(exporter.run([tf.random.uniform([2, 3])] * 2).dtype)
""").lstrip("\n")


def _check(root: Path, dtype: str) -> list[str]:
    files = {"pkg/__init__.py": "", "pkg/model.py": MODEL.format(dtype=dtype), "pkg/extract.py": EXTRACT,
             "export.py": EXPORT}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    job = Job(rule_codes=("MP206",), options=Options(keras="3"), mode=Mode.CHECK)
    results = process_all(sorted(root.rglob("*.py")), job, jobs=1, cache=False)
    return sorted(f"{r.path.relative_to(root).as_posix()}:{f.line}:{f.code}" for r in results for f in r.findings)


def test_a_model_cast_to_its_variable_dtype_is_not_float16_across_files(project):
    # collect: handed a lambda running it (KERAS_CALLABLE); describe: typed by `net.meta` (structural typing)
    assert _check(project, "dtype") == []
    assert _check(project, "variable_dtype") == []


def test_a_model_cast_to_its_compute_dtype_still_is(project):
    assert _check(project, "compute_dtype") == ["pkg/extract.py:14:MP206", "pkg/extract.py:7:MP206"]


def test_within_one_file_too():
    """``param_types``: the same file's Keras class types a module function's parameter."""
    import libcst as cst

    from mpfix.codemods.analysis.param_types import structural_layer_params
    from mpfix.codemods.names import ImportTable

    for dtype, typed in (("dtype", False), ("compute_dtype", True)):
        module = cst.parse_module(MODEL.format(dtype=dtype) + "\n\n" + EXTRACT.split("\n\n\n", 1)[1].split("\n\n\n")[1])
        functions = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
        classes = {s.name.value: s for s in module.body if isinstance(s, cst.ClassDef)}
        found = structural_layer_params(functions, classes, ImportTable(module).resolve)
        assert bool(found) is typed
