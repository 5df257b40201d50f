"""Keras generation detection and import-table name resolution."""

from __future__ import annotations

from importlib import metadata

import libcst as cst
import pytest

from mpfix.codemods.names import ImportTable, canonical
from mpfix import target
from mpfix.policy import Policy, policy_in_text
from mpfix.testing import lint_snippet


def _fake_versions(monkeypatch, versions: dict[str, str]):
    def version(dist):
        if dist in versions:
            return versions[dist]
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(target.metadata, "version", version)
    target.installed_generation.cache_clear()


@pytest.fixture(autouse=True)
def _clear_cache():
    yield
    target.installed_generation.cache_clear()


@pytest.mark.parametrize(("versions", "legacy", "expected"), [
    ({"tensorflow": "2.15.1"}, "", 2),
    ({"tensorflow": "2.16.1", "keras": "3.3.3"}, "", 3),
    ({"tensorflow-cpu": "2.21.0", "tf-keras": "2.21.0"}, "1", 2),
    ({"tensorflow-cpu": "2.21.0"}, "1", 3),  # legacy requested but tf_keras missing: tf.keras is Keras 3
    ({"keras": "3.15.1"}, "", 3),
    ({"keras": "2.15.0"}, "", 2),
    ({}, "", None),
])
def test_installed_generation(monkeypatch, versions, legacy, expected):
    _fake_versions(monkeypatch, versions)
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", legacy)
    assert target.installed_generation() == expected


def test_tf_keras_import_means_keras2_whatever_is_configured(monkeypatch):
    _fake_versions(monkeypatch, {"tensorflow": "2.21.0"})
    assert target.generation_for("3", keras2_file=True) == 2
    assert target.generation_for("auto", keras2_file=False) == 3
    assert target.generation_for("2", keras2_file=False) == 2


@pytest.mark.parametrize(("line", "expected"), [
    ('os.environ["TF_USE_LEGACY_KERAS"] = "1"', True),
    ("os.environ['TF_USE_LEGACY_KERAS']='true'", True),
    ('os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")', True),
    ('os.environ["TF_USE_LEGACY_KERAS"] = "0"', False),
    ('print(os.environ.get("TF_USE_LEGACY_KERAS"))', False),
])
def test_script_that_selects_legacy_keras_itself(line, expected):
    assert target.selects_legacy_keras(f"import os\n{line}\nimport tensorflow as tf\n") is expected


def test_installed_packages_here_are_detected():
    # This machine has tensorflow-cpu >= 2.16: Keras 3 unless TF_USE_LEGACY_KERAS is set.
    assert target.installed_generation() in (2, 3)


def _resolve(code: str, expr: str) -> str | None:
    module = cst.parse_module(code)
    return ImportTable(module).resolve(cst.parse_expression(expr))


@pytest.mark.parametrize(("code", "expr", "expected"), [
    ("import tensorflow as tf", "tf.keras.mixed_precision.LossScaleOptimizer", "keras.mixed_precision.LossScaleOptimizer"),
    ("from tensorflow.keras import mixed_precision as mp", "mp.LossScaleOptimizer", "keras.mixed_precision.LossScaleOptimizer"),
    ("from keras import mixed_precision", "mixed_precision.set_global_policy", "keras.mixed_precision.set_global_policy"),
    ("import tf_keras", "tf_keras.optimizers.Adam", "keras.optimizers.Adam"),
    ("import tensorflow.compat.v2 as tf", "tf.config.run_functions_eagerly", "tensorflow.config.run_functions_eagerly"),
    ("def main():\n    import tensorflow as tf\n", "tf.exp", "tensorflow.exp"),
    ("import numpy as np", "np.exp", "numpy.exp"),
    ("import tensorflow as tf", "exp", None),
    ("from .models import tf", "tf.exp", None),
    ("import tensorflow as tf\nkeras = tf.keras", "keras.mixed_precision.LossScaleOptimizer", "keras.mixed_precision.LossScaleOptimizer"),
    ("import tensorflow as tf\nlayers = tf.keras.layers", "layers.Dense", "keras.layers.Dense"),
    ("import tensorflow as tf\nexp = tf.exp\nexp = 3", "exp", None),  # rebound: ambiguous
])
def test_import_table_resolves_aliases(code, expr, expected):
    assert _resolve(code, expr) == expected


def test_canonical_folds_keras_spellings():
    assert canonical("tensorflow.python.keras.layers.Dense") == "keras.layers.Dense"
    assert canonical("keras.src.layers.Dense") == "keras.layers.Dense"
    assert canonical("kerasx.y") == "kerasx.y"


def test_policy_detection():
    assert policy_in_text("mixed_precision.set_global_policy('mixed_float16')") is Policy.FLOAT16
    assert policy_in_text('keras.config.set_dtype_policy("mixed_bfloat16")') is Policy.BFLOAT16
    assert policy_in_text("# mixed_float16 is mentioned in a comment only") is Policy.NONE


def test_tf_keras_file_is_checked_as_keras2():
    result = lint_snippet("import tf_keras\nimport tensorflow as tf\n"
                          "f = tf.function(lambda x: x, experimental_relax_shapes=True)\n", "MP306", keras=3)
    assert [f.code for f in result.findings] == ["MP306"]
