"""Keras generation detection and import-table name resolution."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

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


# -- the Keras target from the project's declared dependencies (issue 12 #7, issue 15 #3) ------------

from mpfix import declared  # noqa: E402


@pytest.fixture
def nothing_installed(monkeypatch):
    _fake_versions(monkeypatch, {})
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    declared.clear()
    yield
    declared.clear()


def _project(tmp_path, files: dict[str, str]):
    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path / "train.py"


@pytest.mark.parametrize(("files", "expected"), [
    ({"requirements.txt": "numpy\ntensorflow==2.15.*\n"}, 2),
    ({"requirements.txt": "tensorflow<2.16  # Keras 2\n"}, 2),
    ({"requirements.txt": "tensorflow[and-cuda]>=2.16\n"}, 3),
    ({"requirements.txt": "tensorflow~=2.13.0\n"}, 2),
    ({"requirements.txt": "tensorflow~=2.13\n"}, None),  # PEP 440: >=2.13, ==2.*, so 2.16 is allowed
    ({"requirements.txt": "tensorflow>=2.10\n"}, None),
    ({"requirements.txt": "-r requirements/base.txt\n", "requirements/base.txt": "tensorflow-cpu==2.14.1\n"}, 2),
    ({"requirements-dev.txt": "tensorflow>=2.16\ntf-keras>=2.16\n"}, 2),  # the legacy-Keras setup
    ({"requirements.txt": "keras>=3\n"}, 3),
    ({"requirements.txt": "keras<3\n"}, 2),
    ({"pyproject.toml": '[project]\nname = "x"\ndependencies = ["tensorflow>=2.12,<2.16"]\n'}, 2),
    ({"pyproject.toml": '[project]\nname = "x"\n[project.optional-dependencies]\ngpu = ["tensorflow>=2.16"]\n'}, 3),
    ({"pyproject.toml": '[tool.poetry.dependencies]\npython = "^3.10"\ntensorflow = "~2.15"\n'}, 2),
    ({"pyproject.toml": '[tool.poetry.dependencies]\ntensorflow = "^2.15"\n'}, None),
    ({"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    tensorflow>=2.11,<2.16\n"}, 2),
    ({"setup.py": "from setuptools import setup\nREQUIRED = ['tensorflow==2.15.1']\n"
                  "setup(name='x', install_requires=REQUIRED + ['numpy'])\n"}, 2),
    ({"setup.py": "import setuptools\nsetuptools.setup(install_requires=['tensorflow>=2.16'])\n"}, 3),
    ({"environment.yml": "name: x\ndependencies:\n  - python=3.10\n  - tensorflow=2.15\n"}, 2),
    ({"environment.yml": "dependencies:\n  - pip\n  - pip:\n    - tensorflow>=2.17\n"}, 3),
    ({"Pipfile": '[packages]\ntensorflow = "==2.13.*"\n'}, 2),
    ({"Dockerfile": "FROM nvcr.io/nvidia/tensorflow:23.10-tf2-py3\nRUN pip install -r requirements.txt\n"}, 2),
    ({"Dockerfile": "FROM tensorflow/tensorflow:2.15.0-gpu\n"}, 2),
    # DeepLearningExamples' form: the image is an ARG's default, after an unrelated first stage.
    ({"Dockerfile": "ARG FROM_IMAGE_NAME=nvcr.io/nvidia/tensorflow:21.09-tf2-py3\n"
                    "FROM nvcr.io/nvidia/tritonserver:23.06-py3-sdk as clientsdk\nFROM ${FROM_IMAGE_NAME}\n"}, 2),
    ({"Dockerfile": 'ARG IMAGE="nvcr.io/nvidia/merlin/merlin-tensorflow-training:22.03"\nFROM $IMAGE\n'}, 2),
    ({"Dockerfile": "FROM ${BASE:-tensorflow/tensorflow:2.17.0}\n"}, 3),
    ({"Dockerfile": "ARG BASE\nFROM ${BASE}\n"}, None),  # no default: nothing to decide
    ({"Dockerfile": "FROM tensorflow/tensorflow:2.17.0\n"}, 3),
    ({"Dockerfile": "FROM python:3.11\nRUN pip install tensorflow==2.16.1 numpy\n"}, 3),
    ({"Dockerfile": "FROM tensorflow/tensorflow:2.17.0\nENV TF_USE_LEGACY_KERAS=1\n"}, 2),
    ({"requirements.txt": "tensorflow>=2.16\ntf-keras\nkeras>=3\n"}, None),  # a real conflict
    ({"requirements.txt": "tensorflow<2.16\n", "Dockerfile": "FROM tensorflow/tensorflow:2.17.0\n"}, None),
    ({"README.md": "tensorflow==2.15\n"}, None),  # not a dependency file
])
def test_declared_dependencies_decide_the_target(tmp_path, nothing_installed, files, expected):
    path = _project(tmp_path, files)
    found = target.decide("auto", "import tensorflow as tf\n", path)
    assert found.keras == expected, found
    if expected is not None:
        assert "declared" in found.reason


def test_nearest_folder_that_decides_wins(tmp_path, nothing_installed):
    path = _project(tmp_path, {"requirements.txt": "tensorflow>=2.16\n",
                               "legacy/requirements.txt": "tensorflow==2.15.*\n", "legacy/train.py": ""})
    assert target.decide("auto", "", path.parent / "legacy" / "train.py").keras == 2
    assert target.decide("auto", "", path).keras == 3


def test_order_file_config_declared_installed(tmp_path, monkeypatch):
    _fake_versions(monkeypatch, {"tensorflow": "2.21.0"})
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    declared.clear()
    path = _project(tmp_path, {"requirements.txt": "tensorflow==2.15.*\n"})
    # the file's own tf_keras import / legacy switch beat everything (tf_keras is always Keras 2)
    assert target.decide("3", "import tf_keras\n", path).keras == 2
    assert target.decide("3", 'os.environ["TF_USE_LEGACY_KERAS"] = "1"\n', path).keras == 2
    # then the configured generation
    assert target.decide("3", "import tensorflow as tf\n", path) == target.Target(3, "configured keras = 3")
    # then a Keras 3-only API in the file
    assert target.decide("auto", "import keras\nx = keras.ops.exp(1.0)\n", path).keras == 3
    # then the declared dependencies, over what is installed here (TF 2.21)
    assert target.decide("auto", "import tensorflow as tf\n", path).keras == 2
    (tmp_path / "requirements.txt").unlink()
    declared.clear()
    found = target.decide("auto", "import tensorflow as tf\n", path)
    assert found.keras == 3 and "installed tensorflow 2.21.0" in found.reason
    # TF_USE_LEGACY_KERAS=1 where mpfix runs, with tf-keras installed, beats a TensorFlow >= 2.16 pin.
    (tmp_path / "requirements.txt").write_text("tensorflow>=2.16\n")
    declared.clear()
    assert target.decide("auto", "", path).keras == 3
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    assert target.decide("auto", "", path).keras == 3  # tf-keras is not installed (in this fake)
    _fake_versions(monkeypatch, {"tensorflow": "2.21.0", "tf-keras": "2.21.0"})
    assert target.decide("auto", "", path) == target.Target(2, "TF_USE_LEGACY_KERAS=1 is set and tf-keras is installed")


def test_nothing_decides_the_target(tmp_path, nothing_installed):
    path = _project(tmp_path, {"requirements.txt": "numpy\n"})
    found = target.decide("auto", "import tensorflow as tf\n", path)
    assert found.keras is None and not found.known


K2_STEP = """\
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


@tf.function
def train_step(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""


def _lint_file(path, text, fix=True):
    from mpfix.engine import Engine, Options
    from mpfix.selection import select

    path.write_text(text)
    return Engine(select(("ALL",), ()), Options(keras="auto", unsafe_fixes=True)).lint(text, path, fix=fix)


def test_unknown_target_withholds_generation_specific_fixes(tmp_path, nothing_installed):
    path = _project(tmp_path, {})
    result = _lint_file(path, K2_STEP)
    # Analysed as Keras 3 (get_scaled_loss does not exist there), but the fix would differ on
    # Keras 2, where this code is correct: reported, not fixed, and the message says what to set.
    assert result.findings, "the Keras 3 finding is still reported"
    assert result.fixed_text is None
    assert all(f.fix is None for f in result.findings if "get_scaled_loss" in f.message or "scale" in f.message)
    assert any("[tool.mpfix]" in f.message and "keras = 2" in f.message for f in result.findings)


def test_declared_keras2_project_is_left_alone(tmp_path, nothing_installed):
    path = _project(tmp_path, {"requirements.txt": "tensorflow==2.15.*\n"})
    result = _lint_file(path, K2_STEP)
    assert result.fixed_text is None
    assert not [f for f in result.findings if "get_scaled_loss" in f.message]


def test_unknown_target_keeps_fixes_both_generations_agree_on(tmp_path, nothing_installed):
    path = _project(tmp_path, {})
    text = "import tensorflow as tf\n\n\n@tf.function(experimental_relax_shapes=True)\ndef f(x):\n    return x\n"
    found = _lint_file(path, text, fix=False)
    assert [f.code for f in found.findings] == ["MP306"] and found.findings[0].fix is not None
    result = _lint_file(path, text)
    assert result.fixed_text is not None and "reduce_retracing=True" in result.fixed_text


def test_verbose_and_sarif_say_which_target_and_why(tmp_path, nothing_installed, monkeypatch):
    import json

    from click.testing import CliRunner

    from mpfix.cli import cli

    _project(tmp_path, {"requirements.txt": "tensorflow==2.15.*\n", "train.py": K2_STEP,
                        "legacy.py": "import tf_keras\n", "other/setup.cfg": "[metadata]\nname = x\n"})
    (tmp_path / "other" / "mod.py").write_text("import tensorflow as tf\n")
    monkeypatch.chdir(tmp_path)
    verbose = CliRunner().invoke(cli, ["check", "-v", "--no-cache", "-j", "1", "."])
    assert "mpfix: Keras 2 for 2 files (train.py, other/mod.py): declared: requirements.txt: " \
           "tensorflow==2.15.* allows only TensorFlow < 2.16" in verbose.output
    assert "mpfix: Keras 2 for 1 file (legacy.py): the file imports tf_keras" in verbose.output
    sarif = json.loads(CliRunner().invoke(cli, ["check", "--format", "sarif", "--no-cache", "-j", "1", "."]).stdout)
    targets = {t["uri"]: (t["keras"], t["reason"]) for t in sarif["runs"][0]["properties"]["kerasTargets"]}
    assert targets["legacy.py"] == (2, "the file imports tf_keras")
    assert targets["train.py"][0] == 2 and "requirements.txt" in targets["train.py"][1]
    (tmp_path / "requirements.txt").write_text("numpy\n")
    declared.clear()
    unknown = CliRunner().invoke(cli, ["check", "-v", "--no-cache", "-j", "1", "train.py"])
    assert "Keras generation unknown" in unknown.output and "keras = 2" in unknown.output


def test_a_module_named_setup_py_does_not_start_a_project(tmp_path, nothing_installed):
    # DeepLearningExamples keeps runtime helpers in utils/setup.py; the model's Dockerfile is one level up.
    _project(tmp_path, {
        "m/Dockerfile": "FROM nvcr.io/nvidia/tensorflow:22.03-tf2-py3\n",
        "m/utils/setup.py": "import os\n\ndef set_flags():\n    os.environ['TF_XLA_FLAGS'] = '1'\n",
        "m/utils/train.py": "",
    })
    found = target.decide("auto", "import tensorflow as tf\n", tmp_path / "m" / "utils" / "train.py")
    assert found.keras == 2, found
    assert "m/Dockerfile" in found.reason


def test_a_packaging_setup_py_starts_a_project(tmp_path):
    from mpfix.project import is_project_root, root_of_folder

    (tmp_path / "lib" / "pkg").mkdir(parents=True)
    (tmp_path / "lib" / "setup.py").write_text("from setuptools import setup\nsetup(name='x')\n")
    (tmp_path / "lib" / "pkg" / "setup.py").write_text("def configure():\n    pass\n")
    assert is_project_root(str(tmp_path / "lib"))
    assert not is_project_root(str(tmp_path / "lib" / "pkg"))
    assert root_of_folder(str(tmp_path / "lib" / "pkg")) == str(tmp_path / "lib")


@pytest.mark.parametrize(("files", "expected"), [
    ({"requirements.txt": "tensorflow==2.8.*\n"}, (2, 8)),
    ({"requirements.txt": "tensorflow>=2.4,<2.9\n"}, (2, 8)),
    ({"requirements.txt": "tensorflow>=2.10\n"}, None),  # open upwards
    ({"requirements.txt": "numpy\n"}, None),
    ({"Dockerfile": "ARG FROM_IMAGE_NAME=nvcr.io/nvidia/merlin/merlin-tensorflow-training:22.03\n"
                    "FROM ${FROM_IMAGE_NAME}\n"}, (2, 8)),
    ({"Dockerfile": "FROM nvcr.io/nvidia/tensorflow:22.05-tf2-py3\n"}, (2, 8)),
    ({"Dockerfile": "FROM nvcr.io/nvidia/tensorflow:22.06-tf2-py3\n"}, (2, 15)),
    ({"Dockerfile": "FROM nvcr.io/nvidia/tensorflow:21.09-tf1-py3\n"}, (1, 15)),
    ({"Dockerfile": "FROM nvcr.io/nvidia/tensorflow:25.01-tf2-py3\n"}, None),  # not mapped: open
    ({"Dockerfile": "FROM tensorflow/tensorflow:2.8.0-gpu\n"}, (2, 8)),
    # What pip installs wins over the base image's TensorFlow.
    ({"Dockerfile": "FROM nvcr.io/nvidia/tensorflow:22.03-tf2-py3\n", "requirements.txt": "tensorflow==2.12.*\n"},
     (2, 12)),
])
def test_declared_tensorflow_upper_bound(tmp_path, nothing_installed, files, expected):
    path = _project(tmp_path, files)
    assert declared.tf_max_for(path) == expected


def test_nearest_folder_declaring_tensorflow_bounds_it(tmp_path, nothing_installed):
    path = _project(tmp_path, {"requirements.txt": "tensorflow>=2.16\n",
                               "old/Dockerfile": "FROM nvcr.io/nvidia/tensorflow:21.05-tf2-py3\n", "old/x.py": ""})
    assert declared.tf_max_for(path.parent / "old" / "x.py") == (2, 4)
    assert declared.tf_max_for(path) is None
    assert "tf<=2.4" in declared.cache_key(path.parent / "old" / "x.py")


def test_without_a_project_marker_the_working_directory_is_the_project(tmp_path, monkeypatch, nothing_installed):
    # A repository unpacked from a tarball or `git archive` has no .git: the requirements file of a
    # folder above the file still decides when mpfix runs from the repository's root.
    (tmp_path / "efficientdet" / "tf2").mkdir(parents=True)
    (tmp_path / "efficientdet" / "requirements.txt").write_text("tensorflow>=2.10.0,<2.16.0\n")
    train = tmp_path / "efficientdet" / "tf2" / "train_lib.py"
    train.write_text("")
    monkeypatch.chdir(tmp_path)
    found = target.decide("auto", "import tensorflow as tf\n", Path("efficientdet/tf2/train_lib.py"))
    assert found.keras == 2, found
    # Run from a folder that does not hold the file, nothing bounds the walk: the file's folder alone.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert target.decide("auto", "import tensorflow as tf\n", train).keras is None
