"""Turn 14 fuzz round, the cache: project facts kept between runs (``mpfix.project.store``: reach, callers,
cross-file calls) that are valid JSON under the right fingerprint but of the wrong shape (a damaged or
hand-edited cache folder) are scanned again, never a traceback. Before, a ``reached`` table that was a
list raised AttributeError out of ``mpfix check`` (and a callers list of lists, TypeError)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpfix.project import store

UNSEEN = Path(__file__).resolve().parent.parent / "benchmarks" / "unseen"
SCRIPTS = ("clip_temperature_k3.py", "dec_cluster_pow_k3.py")

DAMAGE = {
    "reach: reached is a list": ("reach", lambda facts: {**facts, "reached": [1, 2]}),
    "reach: entries is a table": ("reach", lambda facts: {**facts, "entries": {"a": 1}}),
    "reach: a reached entry is a number": ("reach", lambda facts: {**facts, "reached": {"x.py": 5}}),
    "callers: names are lists": ("callers", lambda facts: {"x.py": [[1], [2]]}),
    "callers: a table, not a mapping of lists": ("callers", lambda facts: {"x.py": {"a": 1}}),
    "crosscalls: a call is a table": ("crosscalls", lambda facts: {"x.py": [{"a": 1}]}),
    "crosscalls: a call's arguments are numbers": ("crosscalls", lambda facts: {"x.py": [["f", "call", 5]]}),
    "crosscalls: calls are a number": ("crosscalls", lambda facts: {"x.py": 5}),
}


def _check(project: Path, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPFIX_CACHE_DIR=str(project / ".mpfix_cache"))
    return subprocess.run([sys.executable, "-m", "mpfix", "check", *argv, "."], cwd=project, capture_output=True,
                          text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, str, dict[Path, bytes]]:
    """A project, its findings and its filled cache folder (one per test process: the damages take turns on it)."""
    project = tmp_path_factory.mktemp("reference")
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\ndependencies = ['tensorflow>=2.16']\n")
    for name in SCRIPTS:
        shutil.copy(UNSEEN / name, project / name)
    # A file changed in the last ``store.RACY_NS`` is stamped by its content until then, and by its stat after: let
    # the files settle once, so that every run below hands out the store the damages are written to.
    time.sleep(max(0.0, (max(p.stat().st_ctime_ns for p in project.iterdir()) + store.RACY_NS - time.time_ns()) / 1e9))
    result = _check(project, "--no-cache")
    assert result.returncode == 1 and ": MP" in result.stdout
    assert _check(project).stdout == result.stdout  # fills the store
    filled = {p: p.read_bytes() for p in (project / ".mpfix_cache").rglob("*") if p.is_file()}
    return project, result.stdout, filled


@pytest.mark.parametrize("name", DAMAGE)
def test_project_facts_of_the_wrong_shape_are_scanned_again(reference, name: str):
    project, expected, filled = reference
    for path, data in filled.items():  # as the first warm run left it (an earlier damage may be stored there)
        path.write_bytes(data)
    kind, damage = DAMAGE[name]
    stored = [p for p in filled if p.name.startswith(f"{kind}-") and p.suffix == ".json"]
    assert stored, sorted(p.name for p in filled)
    for path in stored:
        data = json.loads(path.read_text())
        data["facts"] = damage(data["facts"])  # the fingerprint is kept: the store hands these facts out
        path.write_text(json.dumps(data))
    result = _check(project)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert (result.returncode, result.stdout) == (1, expected)
