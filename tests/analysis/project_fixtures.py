"""Fixtures of the tests that write a small project to disk and check it through the CLI's path (``process_all``).

Import both into a test module (``from .project_fixtures import _fresh, project  # noqa: F401``): ``_fresh`` is
autouse there (no cache folder from the environment; the projects' policies found by earlier tests forgotten before
and after each test), ``project`` is a fresh project root (a ``pyproject.toml``, the working directory).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mpfix import cache as cache_mod
from mpfix import policy as policies


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv(cache_mod.ENV_CACHE_DIR, raising=False)
    policies.forget_projects()
    yield
    policies.forget_projects()


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path
