"""Shared fixtures: a CLI runner and files with known findings; how pytest-xdist shares the tests out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

# A file with two safe, fixable findings (MP306, MP307): the whole path is exercised
# without depending on float16 reachability.
DEPRECATED = """\
import tensorflow as tf


@tf.function(experimental_relax_shapes=True)
def train_step(x):
    return x * 2


tf.config.experimental_run_functions_eagerly(True)
"""

DEPRECATED_FIXED = DEPRECATED.replace("experimental_relax_shapes", "reduce_retracing").replace(
    "experimental_run_functions_eagerly", "run_functions_eagerly")

# Modules whose tests must run one at a time, in one xdist worker, for a reason other than a shared
# fixture: real MultiWorkerMirroredStrategy servers on 127.0.0.1 ports that are chosen free, then
# released, then bound by the workers (two verifies at once could pick the same port).
SERIAL_MODULES = {"tests/verify/test_workers.py"}
# Modules that import TensorFlow into the test process: handed out last, so that a worker has run
# tests/rules/test_api_drift.py::test_rules_do_not_import_tensorflow (sys.modules must hold no
# TensorFlow) before any of them.
IMPORTS_TENSORFLOW = {"tests/verify/test_channel_publish_order.py"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n``, ``--dist loadgroup`` in pyproject.toml): the tests of a module
    that uses a module- or class-scoped fixture (one TensorFlow run shared by its tests) form one
    group, so the fixture runs once, in one worker, not once per worker; so do SERIAL_MODULES. Every
    other test is its own unit. The slow tests are handed out first (a stable sort: the order is
    otherwise the collection's), so no long test starts last while the other worker idles; the
    modules of IMPORTS_TENSORFLOW last."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        fixtures = getattr(item, "_fixtureinfo", None)
        shared = fixtures is not None and any(
            defs and defs[-1].scope in ("module", "class", "package") for defs in fixtures.name2fixturedefs.values())
        if shared or module in SERIAL_MODULES:
            item.add_marker(pytest.mark.xdist_group(module))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # With --no-loadscope-reorder (pyproject.toml) xdist hands the units out in this order.
        items.sort(key=lambda item: 2 if item.nodeid.split("::", 1)[0] in IMPORTS_TENSORFLOW
                   else item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests without a project folder would otherwise leave .mpfix_cache in the current folder.
    if "MPFIX_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("MPFIX_CACHE_DIR", str(tmp_path_factory.mktemp("mpfix-cache")))


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder (has a pyproject.toml) as the current directory."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_color(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    os.environ.pop("FORCE_COLOR", None)
