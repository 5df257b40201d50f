"""Shared fixtures: a CLI runner and files with known findings."""

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
