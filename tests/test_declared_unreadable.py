"""Issue 20 class 1: a ``setup.py`` that builds its TensorFlow requirement with string formatting.

The project declared TF 2.6-2.13 as ``f"tensorflow>={MIN},<{MAX}"``; mpfix could not read it, fell
back to the installed TF 2.21 (Keras 3) and rewrote correct Keras 2 loss scaling. Now simple
constant formatting is evaluated, and what still cannot be read makes the target unknown (never
the installed TensorFlow's), with the reason in ``-v`` and SARIF.
"""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from mpfix import declared, target

K2_STEP = """\
import tensorflow as tf

optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


def train_step(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        scaled_loss = optimizer.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = optimizer.get_unscaled_gradients(scaled_grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""

SETUP = "from setuptools import setup\n{pre}\nsetup(name='x', install_requires=[{req}, 'numpy'])\n"


@pytest.fixture
def tf221_installed(monkeypatch):
    """What this machine has: TensorFlow 2.21 (Keras 3), the fallback that was wrong."""
    def version(dist):
        if dist in ("tensorflow", "tensorflow-cpu"):
            return "2.21.0"
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(target.metadata, "version", version)
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    target.installed_generation.cache_clear()
    declared.clear()
    yield
    target.installed_generation.cache_clear()
    declared.clear()


def _project(tmp_path, setup_py: str):
    (tmp_path / ".git").mkdir()
    (tmp_path / "setup.py").write_text(setup_py)
    path = tmp_path / "train.py"
    path.write_text(K2_STEP)
    return path


@pytest.mark.parametrize(("pre", "req"), [
    ('MIN_TF = "2.6"\nMAX_TF = "2.14"', 'f"tensorflow>={MIN_TF},<{MAX_TF}"'),
    ('MIN_TF = "2.6"\nMAX_TF = "2.14"', '"tensorflow>=%s,<%s" % (MIN_TF, MAX_TF)'),
    ('MAX_TF = "2.14"', '"tensorflow>=2.6,<%s" % MAX_TF'),
    ('MIN_TF = "2.6"\nMAX_TF = "2.14"', '"tensorflow>={},<{}".format(MIN_TF, MAX_TF)'),
    ('RANGE = ">=2.6,<2.14"', '"tensorflow{r}".format(r=RANGE)'),
    ('version_range = ">=2.6,<2.14"', '"tensorflow" + version_range'),
    ('PKG = "tensorflow"\nversion_range = ">=2.6," + "<2.14"', 'PKG + version_range'),
    ('MINOR = 13', 'f"tensorflow>=2.6,<=2.{MINOR}"'),
])
def test_formatted_setup_py_requirements_are_read(tmp_path, tf221_installed, pre, req):
    path = _project(tmp_path, SETUP.format(pre=pre, req=req))
    found = target.decide("auto", K2_STEP, path)
    assert found.keras == 2 and "setup.py" in found.reason, found


@pytest.mark.parametrize(("pre", "req"), [
    ("from mylib.version import MAX_TF", 'f"tensorflow>=2.6,<{MAX_TF}"'),
    ("import os", '"tensorflow" + os.environ.get("TF_RANGE", "")'),
    ("def tf_requirement():\n    return 'tensorflow<2.14'", "tf_requirement()"),
])
def test_an_unreadable_tensorflow_requirement_makes_the_target_unknown(tmp_path, tf221_installed, pre, req):
    path = _project(tmp_path, SETUP.format(pre=pre, req=req))
    found = target.decide("auto", K2_STEP, path)
    assert found.keras is None, found  # not the installed TF 2.21's Keras 3
    assert "cannot be read" in found.reason and "setup.py" in found.reason
    assert [u.where for u in declared.unreadable(path)] == ["setup.py"]


def test_an_opaque_install_requires_that_reads_a_requirements_file_is_read_through_it(tmp_path, tf221_installed):
    path = _project(tmp_path, "from setuptools import setup\n"
                              "setup(install_requires=open('requirements.txt').read().splitlines())\n")
    (tmp_path / "requirements.txt").write_text("tensorflow>=2.6,<2.14\n")
    assert target.decide("auto", K2_STEP, path).keras == 2
    assert declared.unreadable(path) == ()


def test_no_fix_is_written_for_the_project_whose_requirement_cannot_be_read(tmp_path, tf221_installed):
    from mpfix.engine import Engine, Options
    from mpfix.selection import select

    path = _project(tmp_path, SETUP.format(pre="from mylib.version import MAX_TF",
                                           req='f"tensorflow>=2.6,<{MAX_TF}"'))
    result = Engine(select(("ALL",), ()), Options(keras="auto", unsafe_fixes=True)).lint(K2_STEP, path, fix=True)
    assert result.fixed_text is None
    assert all(f.fix is None for f in result.findings)


def test_verbose_and_sarif_say_the_requirements_cannot_be_read(tmp_path, tf221_installed, monkeypatch):
    from click.testing import CliRunner

    from mpfix.cli import cli

    _project(tmp_path, SETUP.format(pre="from mylib.version import MAX_TF", req='f"tensorflow>=2.6,<{MAX_TF}"'))
    monkeypatch.chdir(tmp_path)
    verbose = CliRunner().invoke(cli, ["check", "-v", "--no-cache", "-j", "1", "train.py"])
    assert "Keras generation unknown" in verbose.output
    assert "setup.py" in verbose.output and "cannot be read" in verbose.output
    assert "f\"tensorflow>=2.6,<{MAX_TF}\"" in verbose.output
    sarif = json.loads(CliRunner().invoke(cli, ["check", "--format", "sarif", "--no-cache", "-j", "1", "."]).stdout)
    targets = {t["uri"]: (t["keras"], t["reason"]) for t in sarif["runs"][0]["properties"]["kerasTargets"]}
    assert targets["train.py"][0] is None and "cannot be read" in targets["train.py"][1]
