"""Without a project marker, the project facts read what the run names, not the working directory.

Turn 8: ``mpfix check /tmp/tiny2`` (8 files, no pyproject.toml/.git/setup.py above) from ``/tmp``
ran >100 s, because the project facts (float16 reach, the cross-file scan, the callers index)
walked every file under the working directory. These tests count what the walk lists; no timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpfix import discovery, policy, project
from mpfix.project.files import project_files

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
SETS = 'import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy("mixed_float16")\n'


def _unmarked(path: Path) -> None:
    for folder in [path, *path.parents]:
        if project.is_project_root(str(folder)):
            pytest.skip(f"{folder} holds a project marker: the temporary folder is not marker-free here")


@pytest.fixture
def crowded(tmp_path: Path, monkeypatch):
    """A large working directory (``other/``: files the float16 scan would read) holding ``tiny/``."""
    _unmarked(tmp_path)
    other = tmp_path / "other"
    for n in range(12):
        (other / f"pkg{n}").mkdir(parents=True)
        for m in range(5):
            (other / f"pkg{n}" / f"mod{m}.py").write_text(SETS + "x = tf.cast(1, tf.float16)\n")
    tiny = tmp_path / "tiny"
    (tiny / "sub").mkdir(parents=True)
    for name in ("k3_no_loss_scaling.py", "float16_regression_head.py", "healthy_training.py"):
        (tiny / name).write_bytes((SAMPLES / name).read_bytes())
    (tiny / "sub" / "model.py").write_text("import tensorflow as tf\nx = tf.square(tf.ones([2], tf.float16))\n")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    project.set_scope(None)
    policy.forget_projects()


def _listed(monkeypatch) -> list[Path]:
    """Every file discovery hands out from now on (the run's own discovery and every project walk)."""
    seen: list[Path] = []
    real = discovery.discover

    def recording(*args, **kwargs):
        for found in real(*args, **kwargs):
            seen.append(Path(found))
            yield found

    monkeypatch.setattr(discovery, "discover", recording)
    return seen


def _check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", MPFIX_CACHE_DIR=str(cwd / ".cache-for-test"))
    return subprocess.run([sys.executable, "-m", "mpfix", "check", "--no-cache", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_folder_without_a_marker_is_its_own_project_not_the_working_directory(crowded: Path, monkeypatch):
    from click.testing import CliRunner

    from mpfix.cli import main

    seen = _listed(monkeypatch)
    result = CliRunner().invoke(main, ["check", "--no-cache", "--jobs", "1", "--policy", "mixed_float16",
                                       "--format", "json", "tiny"])
    assert result.exit_code in (0, 1), result.output
    assert seen, "the run listed no file"
    outside = sorted({str(p) for p in seen if crowded / "tiny" not in p.resolve().parents})
    assert outside == [], outside
    assert project.project_root(crowded / "tiny" / "sub" / "model.py") == (crowded / "tiny").resolve()


def test_without_a_marker_the_findings_are_those_of_a_marked_folder(crowded: Path):
    # The bound changes no finding: the same folder with a pyproject.toml is checked the same way.
    for extra in ((), ("--policy", "mixed_float16")):
        bare = _check("--format", "json", *extra, "tiny", cwd=crowded)
        (crowded / "tiny" / "pyproject.toml").write_text("[project]\nname = 'tiny'\n")
        marked = _check("--format", "json", *extra, "tiny", cwd=crowded)
        (crowded / "tiny" / "pyproject.toml").unlink()
        assert "Traceback" not in bare.stderr, bare.stderr
        assert bare.returncode == marked.returncode == 1, (bare.stderr, marked.stderr)
        assert json.loads(bare.stdout) == json.loads(marked.stdout)


def test_a_file_argument_without_a_marker_reads_its_siblings_only(crowded: Path):
    tiny = crowded / "tiny"
    project.set_scope(project.scope_of([tiny / "healthy_training.py"]))
    root = project.project_root(tiny / "healthy_training.py")
    assert root == tiny.resolve()
    listed = {p.name for p in project_files(root)}
    assert listed == {"k3_no_loss_scaling.py", "float16_regression_head.py", "healthy_training.py"}
    # A file whose folder the arguments name whole is in that project, walked whole.
    project.set_scope(project.scope_of([tiny, tiny / "sub" / "model.py"]))
    assert project.project_root(tiny / "sub" / "model.py") == tiny.resolve()
    assert "model.py" in {p.name for p in project_files(tiny.resolve())}


def test_file_arguments_in_nested_folders_share_the_outer_project(crowded: Path):
    tiny = crowded / "tiny"
    project.set_scope(project.scope_of([tiny / "healthy_training.py", tiny / "sub" / "model.py"]))
    assert project.project_root(tiny / "sub" / "model.py") == tiny.resolve()
    assert {p.name for p in project_files(tiny.resolve())} == {
        "k3_no_loss_scaling.py", "float16_regression_head.py", "healthy_training.py", "model.py"}


def test_a_marker_still_makes_the_whole_project(crowded: Path):
    # Unchanged for marked projects: checking one subfolder reads the whole project around it.
    (crowded / "pyproject.toml").write_text("[project]\nname = 'big'\n")
    project.forget_roots()
    project.set_scope(project.scope_of([crowded / "tiny"]))
    root = project.project_root(crowded / "tiny" / "healthy_training.py")
    assert root == crowded.resolve()
    assert len(project_files(root)) == 12 * 5 + 4


def test_no_scope_keeps_the_working_directory(crowded: Path):
    # A library caller that names no scope gets the working directory, as before.
    project.set_scope(None)
    assert project.project_root(crowded / "tiny" / "healthy_training.py") == crowded.resolve()


def test_the_cache_does_not_serve_a_result_decided_by_another_scope(crowded: Path):
    # other/train.py sets the policy and imports tiny's module: reached when the run names the whole
    # working directory, not when it names tiny alone. Each run must decide from its own scope, with
    # the cache on, in both orders.
    (crowded / "tiny" / "__init__.py").write_text("")
    (crowded / "other" / "train.py").write_text(SETS + "import tiny.sub.model\n")
    (crowded / "tiny" / "sub" / "__init__.py").write_text("")
    head = (SAMPLES / "float16_regression_head.py").read_text()  # MP205 where float16 reaches it
    (crowded / "tiny" / "sub" / "model.py").write_text(
        "".join(line for line in head.splitlines(True) if "set_global_policy" not in line))
    env = dict(os.environ, NO_COLOR="1", MPFIX_CACHE_DIR=str(crowded / ".cache-for-test"))

    def codes(*args: str) -> list[str]:
        done = subprocess.run([sys.executable, "-m", "mpfix", "check", "--format", "json", *args], cwd=crowded,
                              env=env, capture_output=True, text=True, timeout=300)
        assert "Traceback" not in done.stderr, done.stderr
        return sorted(f["code"] for f in json.loads(done.stdout) if f["filename"].endswith("model.py"))

    alone = codes("tiny/sub")
    whole = codes(".", "--select", "ALL")
    assert codes("tiny/sub") == alone
    assert codes(".", "--select", "ALL") == whole
    assert alone != whole, (alone, whole)  # the file's findings do depend on the scope here


def test_a_spawned_worker_gets_its_parents_scope(crowded: Path, monkeypatch):
    import gc
    import signal

    from mpfix import runner
    from mpfix.engine import Options

    monkeypatch.setitem(runner._WORKER, "job", runner._WORKER.get("job"))
    monkeypatch.setitem(runner._WORKER, "keyer", runner._WORKER.get("keyer"))
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    # The worker's collector setting (freeze, thresholds), undone too: left in this test process it made
    # a later test in the same xdist worker fail (test_parallel's collector test, in a shuffled order).
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    scope = project.scope_of([crowded / "tiny"])
    project.set_scope(None)
    try:
        runner._init_worker(runner.Job(rule_codes=("MP101",), options=Options(), mode=runner.Mode.CHECK), None,
                            None, scope)
    finally:
        for signum, handler in saved.items():  # the worker's handlers, undone
            signal.signal(signum, handler)
        gc.set_threshold(*thresholds)
        if not frozen:
            gc.unfreeze()
    assert project.current_scope() == scope


def test_checking_a_home_folder_skips_the_python_installations_in_it(tmp_path: Path):
    # `mpfix check .` from $HOME with no marker: the run (and so the project facts) walked
    # ~/.pyenv's interpreters (15,000 files here). Ruff's default excludes skip them; so does mpfix.
    from mpfix.discovery import discover

    for folder in (".pyenv/versions/3.11.7/lib/python3.11", ".direnv/python-3.11/lib", "__pypackages__/3.11/lib",
                   "_build/html/_static", "buck-out/gen", ".vscode", ".pytype/pyi", ".pants.d/run", ".bzr",
                   ".git-rewrite/t"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "mod.py").write_text(SETS)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text(SETS)
    assert [p.relative_to(tmp_path).as_posix() for p in discover([tmp_path])] == ["work/train.py"]


def test_the_editor_server_bounds_projects_by_its_workspace_folders(crowded: Path):
    # An editor may start the server anywhere (here: the crowded folder); a document's project
    # facts read the workspace folder holding it, and a document outside every workspace folder
    # is a script among its siblings.
    pytest.importorskip("pygls")
    from lsprotocol import types
    from pygls.workspace import Workspace

    from mpfix.lsp import MpfixServer

    server = MpfixServer()
    tiny = crowded / "tiny"
    server.protocol._workspace = Workspace(None, workspace_folders=[
        types.WorkspaceFolder(uri=tiny.as_uri(), name="tiny")])
    server.bound_projects()
    assert project.project_root(tiny / "sub" / "model.py") == tiny.resolve()
    assert {p.name for p in project_files(tiny.resolve())} >= {"model.py", "healthy_training.py"}
    stray = crowded / "other" / "pkg1" / "mod0.py"
    assert project.project_root(stray) == stray.parent.resolve()
    assert len(project_files(stray.parent.resolve())) == 5  # its folder, flat
    server.protocol._workspace = Workspace(tiny.as_uri())  # an older client: rootUri only
    server.bound_projects()
    assert project.current_scope() == project.scope_of([tiny])


def test_verbose_says_what_a_marker_free_project_reads(crowded: Path):
    done = _check("--verbose", "tiny", cwd=crowded)
    assert "Traceback" not in done.stderr, done.stderr
    assert ("mpfix: project tiny: no pyproject.toml, setup.py or .git at or above it, so its float16 reach and "
            "callers read what the run names (walked whole: 4 files), not the working directory") in done.stderr
    done = _check("--verbose", "tiny/healthy_training.py", cwd=crowded)
    assert "(its own files and the paths named below it: 3 files)" in done.stderr, done.stderr
    (crowded / "tiny" / "pyproject.toml").write_text("[project]\nname = 'tiny'\n")
    assert "no pyproject.toml" not in _check("--verbose", "tiny", cwd=crowded).stderr
