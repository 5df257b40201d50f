"""A ``tf.Module`` (no Keras class) holding a project Keras model of ANOTHER file: calling it gives the compute dtype.

research DELF's export_local_model.py holds ``self._model = delf_model.Delf(...)`` (delf_model.py) in a ``tf.Module``
whose ``tf.function`` runs it. In one file the dtype inference knew such a model's output is float16 (certain
provenance: ``dtype_outputs``); across files it did not. The fact (``ProjectFileFacts.held_models``,
``mpfix.project.held_models``): the file constructs a project class of another file whose bases resolve to a Keras
layer/model and which, with its project base classes, never spells ``float32``; constructed without ``dtype=`` and
held as a ``self.`` attribute of a non-Keras class, its output is float16 under ``mixed_float16``.

Ran (TF 2.21 CPU, Keras 3.15.1, mixed_float16, ``exporter.run(tf.random.uniform([2, 3]), tf.constant(0.1))``):
``scores >= thres`` raises "TypeError: Input 'y' of 'GreaterEqual' Op has type float32 that does not match type float16
of argument 'x'"; with the Scorer's head built ``dtype="float32"`` it runs. A base class that spells float32 anywhere
(here its hidden layer: the output is still float16) is left unknown: the scan reads text, not which layer is the head.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix import policy as policies
from mpfix.engine import Options
from mpfix.project import facts as project_facts
from mpfix.runner import Job, Mode, process_all

from .project_fixtures import _fresh, project  # noqa: F401  (fixtures)

SCORER = textwrap.dedent("""
    import tensorflow as tf


    class Base(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = tf.keras.layers.Dense(8, activation="relu"{base_dtype})


    class Scorer({base}):
        def __init__(self):
            super().__init__()
            self.score = tf.keras.layers.Dense(1, activation="sigmoid"{dtype})

        def call(self, x):
            return self.score(self.hidden(x))
""").lstrip("\n")
EXPORT = textwrap.dedent("""
    import tensorflow as tf

    from pkg import scorer


    class Exporter(tf.Module):
        def __init__(self):
            super().__init__()
            self._model = {built}

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec((), tf.float32)])
        def run(self, x, thres):
            scores = self._model(x, training=False)
            return tf.where(scores >= thres)


    if __name__ == "__main__":
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        exporter = Exporter()
        print(exporter.run(tf.random.uniform([2, 3]), tf.constant(0.1)))
""").lstrip("\n")
FOUND = ["export.py:14:MP206"]


def _write(root: Path, built: str = "scorer.Scorer()", dtype: str = "", base: str = "Base",
           base_dtype: str = "", export: str = EXPORT) -> None:
    files = {"pkg/__init__.py": "", "pkg/scorer.py": SCORER.format(dtype=dtype, base=base, base_dtype=base_dtype),
             "export.py": export.format(built=built)}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _check(root: Path, cache: bool = False) -> list[str]:
    job = Job(rule_codes=("MP206",), options=Options(keras="3"), mode=Mode.CHECK)
    results = process_all(sorted(p for p in root.rglob("*.py") if ".mpfix_cache" not in p.parts), job, jobs=1,
                          cache=cache)
    return sorted(f"{r.path.relative_to(root).as_posix()}:{f.line}:{f.code}" for r in results for f in r.findings)


def _held(root: Path) -> tuple[str, ...]:
    return project_facts.file_facts(root / "export.py").held_models


def test_a_held_project_model_of_another_file_returns_float16(project):
    _write(project)
    assert _held(project) == ("pkg.scorer.Scorer",)
    assert _check(project) == FOUND


def test_imported_by_its_own_name(project):
    _write(project, built="Scorer()", export=EXPORT.replace("from pkg import scorer", "from pkg.scorer import Scorer"))
    assert _held(project) == ("pkg.scorer.Scorer",)
    assert _check(project) == FOUND


@pytest.mark.parametrize("kwargs", [
    {"dtype": ', dtype="float32"'},  # the head computes in float32
    {"base_dtype": ', dtype="float32"'},  # a project base class spells float32
    {"base": "Base, Mixin"},  # a base the project does not define: unknown
    {"dtype": ", dtype=tf.keras.mixed_precision.Policy('float64')"},  # a layer given its own dtype
    {"dtype": ")\n        self.out = lambda y: tf.cast(y, self.dtype"},  # the variable dtype: float32 here
])
def test_a_model_that_may_return_float32_is_not_held_float16(project, kwargs):
    _write(project, **kwargs)
    assert _held(project) == ()
    assert _check(project) == []


@pytest.mark.parametrize("built", [
    'scorer.Scorer(dtype="float32")',  # built with its own dtype
    "scorer.Scorer() if tf.executing_eagerly() else None",  # not a construction
    "tf.keras.models.load_model('scorer.keras')",  # not a project class
])
def test_other_constructions_are_no_evidence(project, built):
    _write(project, built=built)
    assert _check(project) == []


def test_the_held_models_in_the_cache_key(project):
    """A cached run and a --no-cache run agree after the OTHER file (the model's head) changes."""
    _write(project)
    assert _check(project, cache=True) == FOUND
    (project / "pkg" / "scorer.py").write_text(SCORER.format(dtype=', dtype="float32"', base="Base", base_dtype=""))
    policies.forget_projects()
    project_facts.forget()
    cached = _check(project, cache=True)
    policies.forget_projects()
    project_facts.forget()
    assert cached == _check(project, cache=False) == []
