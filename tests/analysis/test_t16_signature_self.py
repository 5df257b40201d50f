"""In the ``tf.function`` itself: a parameter its ``input_signature`` makes float32 meets the float16 output of a Keras
model the function's ``tf.Module`` holds (built in this file) -- a comparison or arithmetic, in the function or in a
closure of it (``NameDtypes.signature_float32``; ``DtypeFacts._output_mix`` reads comparisons now, as ``mixes`` does).

Ran (TF 2.21 CPU, Keras 3.15.1, mixed_float16, ``exporter.run(tf.random.uniform([2, 3]), tf.constant(0.1))``):
``scores >= thres`` raises "TypeError: Input 'y' of 'GreaterEqual' Op has type float32 that does not match type float16
of argument 'x'"; with the fix (``tf.cast(scores, tf.float32) >= thres``) it runs. The look-alikes run as they are.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.api import lint_text
from mpfix.config import Settings
from mpfix.engine import Options
from mpfix.runner import Job, Mode, process_all

from .project_fixtures import _fresh, project  # noqa: F401  (fixtures)

EXPORT = textwrap.dedent("""
    import tensorflow as tf


    class Scorer(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = tf.keras.layers.Dense(8, activation="relu")
            self.score = tf.keras.layers.Dense(1, activation="sigmoid"{dtype})

        def call(self, x):
            return self.score(self.hidden(x))


    class Exporter(tf.Module):
        def __init__(self):
            super().__init__()
            self._model = Scorer()

        {decorator}
        def run(self, x, thres):
            {body}


    if __name__ == "__main__":
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        exporter = Exporter()
        print(exporter.run(tf.random.uniform([2, 3]), tf.constant(0.1)))
""").lstrip("\n")
SIGNATURE = "@tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), {spec}])"
SPEC = "tf.TensorSpec((), tf.float32)"
COMPARE = """scores = self._model(x, training=False)
        return tf.where(scores >= thres)"""


def _text(body: str = COMPARE, spec: str = SPEC, decorator: str = SIGNATURE, dtype: str = "") -> str:
    return EXPORT.format(body=body, decorator=decorator.format(spec=spec), dtype=dtype)


def _check(root: Path, text: str) -> list[str]:
    (root / "export.py").write_text(text)
    job = Job(rule_codes=("MP206",), options=Options(keras="3"), mode=Mode.CHECK)
    results = process_all([root / "export.py"], job, jobs=1, cache=False)
    return [f"{f.line}:{f.code}" for r in results for f in r.findings]


@pytest.mark.parametrize("spec", [SPEC, "tf.TensorSpec(shape=())", 'tf.TensorSpec((), dtype="float32", name="t")'])
def test_a_signature_float32_parameter_compared_with_the_models_output(project, spec):
    assert _check(project, _text(spec=spec)) == ["22:MP206"]


@pytest.mark.parametrize("body", [
    "return self._model(x) * thres",  # arithmetic
    "scores = self._model(x)\n        return tf.add(scores, thres)",  # a same-dtype op
    "scores = self._model(x)\n\n        def pick():\n            return tf.where(scores > thres)\n\n"
    "        return pick()",  # a closure reading both
])
def test_other_spellings_of_the_mix(project, body):
    assert len(_check(project, _text(body=body))) == 1


def test_the_fix_casts_the_float16_side_to_float32(project):
    text = _text()
    (project / "export.py").write_text(text)
    settings = Settings(select=("MP206",), keras="3", unsafe_fixes=True)
    result = lint_text(text, project / "export.py", settings, fix=True)
    assert "return tf.where(tf.cast(scores, tf.float32) >= thres)" in result.fixed_text


@pytest.mark.parametrize("text", [
    _text(spec="tf.TensorSpec((), tf.float16)"),  # a float16 signature
    _text(spec="tf.TensorSpec.from_tensor(tf.constant(0.5))"),  # not a TensorSpec call the dtype is read from
    _text(decorator="@tf.function"),  # no signature: the callers decide
    _text(body="thres = tf.cast(thres, tf.float16)\n        return tf.where(self._model(x) >= thres)"),  # rebound
    _text(body="scores = tf.cast(self._model(x), tf.float32)\n        return tf.where(scores >= thres)"),
    _text(dtype=', dtype="float32"'),  # the model's head computes in float32
    _text(body="def pick(s, thres):\n            return tf.where(s > thres)\n\n"
               "        return pick(self._model(x), 0.5)"),  # the closure's own parameter of that name
])
def test_look_alikes_are_silent(project, text):
    assert _check(project, text) == []


# -- the instance parameter is decided by binding, not by its name ----------------------------------------------
BOUND = textwrap.dedent("""
    import tensorflow as tf


    class Exporter(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec(())])
        def run(this, x, thres):
            return x >= thres

        @staticmethod
        @tf.function(input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec(())])
        def plain(x, thres):
            return x >= thres


    @tf.function(input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec(())])
    def module_function(self, thres):
        return self >= thres
""").lstrip("\n")


def _signature_float32(function: str) -> dict[str, bool]:
    """What the LibCST reader and the scan's ``ast`` reader say of each parameter of ``function`` in ``BOUND``."""
    import ast

    import libcst as cst

    from mpfix.codemods.facts.dtype_facts import facts_for
    from mpfix.project.signatures import signature_float32

    module = cst.parse_module(BOUND)
    analysis = facts_for(module, 3)._a
    region = next(r for r in analysis.regions if getattr(getattr(r.node, "name", None), "value", None) == function)
    names = [p.name.value for p in region.node.params.params]
    tree = ast.parse(BOUND)
    nodes = {n.name: (n, isinstance(parent, ast.ClassDef)) for parent in ast.walk(tree)
             for n in getattr(parent, "body", []) if isinstance(n, ast.FunctionDef)}
    node, method = nodes[function]
    resolve = {"tf.function": "tensorflow.function", "tf.TensorSpec": "tensorflow.TensorSpec"}.get
    scanned = signature_float32(node, lambda n: resolve(ast.unparse(n)), method)
    return {name: (analysis.signature_float32(name, region), name in scanned) for name in names}


@pytest.mark.parametrize("function, expected", [
    ("run", {"this": False, "x": True, "thres": True}),  # a method: its first parameter is the instance
    ("plain", {"x": True, "thres": True}),  # a staticmethod has none
    ("module_function", {"self": True, "thres": True}),  # a module function's first parameter is a parameter
])
def test_the_instance_parameter_is_decided_by_binding(function, expected):
    assert _signature_float32(function) == {name: (value, value) for name, value in expected.items()}
