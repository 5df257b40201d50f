"""One predicate for "this project Keras class computes in the compute dtype" (``mpfix.project.class_dtypes``).

The cross-file scan (a Keras instance or a callable running one handed to another file) and the held models of a
``tf.Module`` asked it apart: the scan read only the class's own text and, for a class name defined twice, only its
last definition; ``held_models`` followed the project bases but parsed each callee file again. Now both ask
``float16_class`` (held models with ``dtype=`` keywords counted), which reads the class and its project bases, every
definition of a name, from one parse per file.

Ran (TF 2.21 CPU, Keras 3.15.1, mixed_float16, ``python export.py``): with ``Ranker(Scorer)`` whose base casts its
output to float32 the concat runs (float32); mpfix reported MP206 there before (the scan did not read the base). The
same with ``Scorer`` defined a second time after ``Ranker`` without the cast (Ranker still inherits the first: runs).
With no cast in the base the concat raises (ConcatV2: a half tensor), and MP206 stays.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.engine import Options
from mpfix.project.class_dtypes import class_dtypes
from mpfix.runner import Job, Mode, process_all

from .project_fixtures import _fresh, project  # noqa: F401  (fixtures)

SCORER = """
class Scorer(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(4)

    def call(self, x):
        return {output}
"""
RANKER = """
class Ranker(Scorer):
    pass
"""
EXTRACT = textwrap.dedent("""
    import tensorflow as tf


    def collect(images, model_fn):
        out = tf.zeros([0, 4], dtype=tf.float32)
        for image in images:
            out = tf.concat([out, model_fn(image)], 0)
        return out
""").lstrip("\n")
EXPORT = textwrap.dedent("""
    import keras
    import tensorflow as tf

    from pkg import extract, model


    class Exporter(tf.Module):
        def __init__(self):
            super().__init__()
            self._model = model.Ranker()

        def run(self, images):
            return extract.collect(images, lambda x: self._model(x))


    if __name__ == "__main__":
        keras.mixed_precision.set_global_policy("mixed_float16")
        exporter = Exporter()
        print(exporter.run([tf.random.uniform([2, 3])] * 2).dtype)
""").lstrip("\n")
CAST = "tf.cast(self.dense(x), tf.float32)"
PLAIN = "self.dense(x)"
FOUND = ["pkg/extract.py:7:MP206"]


def _check(root: Path, *parts: str) -> list[str]:
    model = "import keras\nimport tensorflow as tf\n\n" + "\n".join(textwrap.dedent(p) for p in parts)
    files = {"pkg/__init__.py": "", "pkg/model.py": model, "pkg/extract.py": EXTRACT, "export.py": EXPORT}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    job = Job(rule_codes=("MP206",), options=Options(keras="3"), mode=Mode.CHECK)
    results = process_all(sorted(root.rglob("*.py")), job, jobs=1, cache=False)
    return sorted(f"{r.path.relative_to(root).as_posix()}:{f.line}:{f.code}" for r in results for f in r.findings)


def test_a_subclass_of_a_model_that_casts_to_float32_is_not_float16(project):
    assert _check(project, SCORER.format(output=CAST), RANKER) == []  # HEAD: FOUND (the base was not read)


def test_a_class_defined_twice_counts_both_definitions(project):
    # Ranker inherits the first Scorer (the cast); the name's last definition is another class.
    assert _check(project, SCORER.format(output=CAST), RANKER, SCORER.format(output=PLAIN)) == []  # HEAD: FOUND


def test_a_subclass_of_a_compute_dtype_model_is_still_float16(project):
    assert _check(project, SCORER.format(output=PLAIN), RANKER) == FOUND


def test_a_name_defined_twice_may_be_either(project):
    # Ranker inherits the first Scorer (float16: the concat raises), but a later definition of the name casts: the
    # text cannot tell which one a holder means (an instance of the name is the last one), so no fact either way.
    assert _check(project, SCORER.format(output=PLAIN), RANKER, SCORER.format(output=CAST)) == []


@pytest.mark.parametrize(("text", "expected"), [
    (b"dtype = None\nclass A:\n    x = 1\n", {"A": (False, False)}),
    (b"class A:\n    def f(self):\n        return tf.zeros(3, dtype=tf.int32)\n", {"A": (False, True)}),
    (b"class A:\n    def f(self, y):\n        return tf.cast(y, self.variable_dtype)\n", {"A": (True, False)}),
    (b"class A:\n    y = 'float32'\nclass A:\n    pass\n", {"A": (True, False)}),  # every definition of the name
    (b"class A:\n    pass\n", {}),  # no "float32" nor "dtype" in the bytes: nothing parsed
    (b"class A(:\n    dtype = 1\n", None),  # does not parse: cannot tell
])
def test_class_dtypes(text, expected):
    assert class_dtypes(text) == expected
