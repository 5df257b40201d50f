"""The pre-commit hooks of ``.pre-commit-hooks.yaml``, run by the real ``pre-commit``.

pre-commit clones the hook repository at a commit and pip-installs it into its
own virtualenv, so the checkout under test is snapshotted (tracked and
untracked-but-not-ignored files, as they are now) into a temporary git repo
first: that is what a user's ``rev:`` would point at, and it leaves the shared
checkout's index alone (``try-repo`` on a dirty repo stages into its index).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).resolve().parents[1]

BUGGY = """\
import tensorflow as tf


@tf.function(experimental_relax_shapes=True)
def train_step(x):
    return x * 2
"""

FIXED = BUGGY.replace("experimental_relax_shapes", "reduce_retracing")

GIT_ENV = {
    "GIT_AUTHOR_NAME": "mpfix tests", "GIT_AUTHOR_EMAIL": "tests@mpfix.invalid",
    "GIT_COMMITTER_NAME": "mpfix tests", "GIT_COMMITTER_EMAIL": "tests@mpfix.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _pre_commit() -> list[str]:
    exe = shutil.which("pre-commit")
    if exe is None:  # installed with the test extra, but maybe not on PATH
        return [sys.executable, "-m", "pre_commit"]
    return [exe]


def _git(*args: str, cwd: Path, env: dict) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("home")
    env = dict(os.environ, **GIT_ENV, HOME=str(home), PRE_COMMIT_HOME=str(tmp_path_factory.mktemp("pre-commit-home")))
    env.pop("GIT_DIR", None)
    env.pop("GIT_INDEX_FILE", None)
    return env


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory, env) -> tuple[Path, str]:
    """A committed snapshot of this checkout's working tree: (path, commit)."""
    files = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=CHECKOUT, env=env).split("\0")
    repo = tmp_path_factory.mktemp("hook-repo")
    for name in filter(None, files):
        source = CHECKOUT / name
        if source.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    assert (repo / ".pre-commit-hooks.yaml").is_file()
    _git("init", "-q", cwd=repo, env=env)
    _git("add", "-A", cwd=repo, env=env)
    _git("commit", "-q", "-m", "snapshot", cwd=repo, env=env)
    return repo, _git("rev-parse", "HEAD", cwd=repo, env=env).strip()


def _user_repo(path: Path, env: dict, files: dict[str, str]) -> Path:
    path.mkdir()
    _git("init", "-q", cwd=path, env=env)
    for name, text in files.items():
        (path / name).write_text(text)
    _git("add", "-A", cwd=path, env=env)
    return path


def _run(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_try_repo_check_hook_fails_with_the_finding(tmp_path, hook_repo, env):
    repo, _ = hook_repo
    user = _user_repo(tmp_path / "user", env, {"train.py": BUGGY})
    result = _run([*_pre_commit(), "try-repo", str(repo), "mpfix", "--files", "train.py"], user, env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "train.py:4:14: MP306" in result.stdout
    assert (user / "train.py").read_text() == BUGGY  # the check hook never writes


def test_try_repo_fix_hook_rewrites_the_file(tmp_path, hook_repo, env):
    repo, _ = hook_repo
    user = _user_repo(tmp_path / "user", env, {"train.py": BUGGY})
    result = _run([*_pre_commit(), "try-repo", str(repo), "mpfix-fix", "--files", "train.py"], user, env)
    # pre-commit's convention: a hook that modified files fails, so the user re-stages them.
    assert result.returncode == 1, result.stdout + result.stderr
    assert "files were modified by this hook" in result.stdout
    assert (user / "train.py").read_text() == FIXED


def _config(repo: Path, rev: str) -> str:
    # The README's snippet, pointed at the snapshot instead of GitHub.
    return (f"repos:\n  - repo: {repo}\n    rev: {rev}\n    hooks:\n"
            "      - id: mpfix-fix\n      - id: mpfix\n")


def test_config_fix_then_check_then_clean_second_run(tmp_path, hook_repo, env):
    repo, rev = hook_repo
    user = _user_repo(tmp_path / "user", env, {"train.py": BUGGY, ".pre-commit-config.yaml": _config(repo, rev)})
    first = _run([*_pre_commit(), "run"], user, env)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "files were modified by this hook" in first.stdout
    assert (user / "train.py").read_text() == FIXED
    _git("add", "train.py", cwd=user, env=env)
    second = _run([*_pre_commit(), "run"], user, env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.count("Passed") == 2
    assert "MP306" not in second.stdout


def test_no_staged_python_files_exits_zero_quietly(tmp_path, hook_repo, env):
    repo, rev = hook_repo
    user = _user_repo(tmp_path / "user", env, {"notes.txt": "experimental_relax_shapes\n",
                                               ".pre-commit-config.yaml": _config(repo, rev)})
    result = _run([*_pre_commit(), "run"], user, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("(no files to check)Skipped") == 2
    assert "MP" not in result.stdout.replace("mpfix", "")


def test_no_python_files_given_to_mpfix_itself_is_quiet(tmp_path):
    # pre-commit may call a hook with no file names (e.g. `always_run`): mpfix then checks
    # the current folder, which here has nothing to check.
    (tmp_path / "notes.txt").write_text("not python\n")
    result = subprocess.run([sys.executable, "-m", "mpfix", "check", "--quiet"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout == "" and result.stderr == ""


# -- a Keras 2 project and a notebook, no TensorFlow in the hook's environment (issue 15 #2, #3) ------

K2_TRAIN = """\
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential([tf.keras.layers.Dense(4), tf.keras.layers.Activation("linear", dtype="float32")])
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""


def _notebook(*sources: str) -> str:
    import json

    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
              "source": source.splitlines(keepends=True)} for i, source in enumerate(sources)]
    nb = {"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"  # Jupyter's layout


NOTEBOOK = _notebook("import tensorflow as tf\n!pip install -q tf-keras \\\n    numpy",
                     "if True:\n    !nvidia-smi\n" + BUGGY.split("\n", 2)[2])
NOTEBOOK_FIXED = NOTEBOOK.replace("experimental_relax_shapes", "reduce_retracing")


def _hook_env_python(env: dict) -> Path:
    found = sorted(Path(env["PRE_COMMIT_HOME"]).glob("repo*/py_env-*/bin/python"))
    assert found, "pre-commit did not create a python environment for the hooks"
    return found[0]


def test_keras2_project_with_a_notebook(tmp_path, hook_repo, env):
    repo, rev = hook_repo
    user = _user_repo(tmp_path / "user", env, {
        "requirements.txt": "tensorflow==2.15.*\nnumpy\n", "train.py": K2_TRAIN, "explore.ipynb": NOTEBOOK,
        ".pre-commit-config.yaml": _config(repo, rev)})
    first = _run([*_pre_commit(), "run"], user, env)
    output = first.stdout + first.stderr
    # The hook environment is pre-commit's own virtualenv: no TensorFlow, no nbformat, no IPython.
    missing = subprocess.run([str(_hook_env_python(env)), "-c",
                              "import importlib.util as u; print([m for m in ('tensorflow', 'nbformat', 'IPython') "
                              "if u.find_spec(m)])"], capture_output=True, text=True)
    assert missing.stdout.strip() == "[]", missing.stdout + missing.stderr
    assert first.returncode == 1, output
    assert "nbformat" not in output and "MP000" not in output
    # mpfix-fix fixed the notebook's deprecated argument (and failed, as pre-commit does for modified files)...
    assert "files were modified by this hook" in first.stdout
    assert (user / "explore.ipynb").read_text() == NOTEBOOK_FIXED
    # ...and left the correct Keras 2 training step alone: the requirements pin TensorFlow 2.15.
    assert (user / "train.py").read_text() == K2_TRAIN
    assert "get_scaled_loss" not in output and "MP303" not in output
    _git("add", "-A", cwd=user, env=env)
    second = _run([*_pre_commit(), "run"], user, env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.count("Passed") == 2
    assert (user / "train.py").read_text() == K2_TRAIN


def test_unknown_keras_target_is_reported_never_rewritten(tmp_path, hook_repo, env):
    repo, rev = hook_repo
    user = _user_repo(tmp_path / "user", env, {"requirements.txt": "numpy\n", "train.py": K2_TRAIN,
                                               ".pre-commit-config.yaml": _config(repo, rev)})
    result = _run([*_pre_commit(), "run"], user, env)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert (user / "train.py").read_text() == K2_TRAIN  # nothing rewritten into Keras 3's API
    assert "files were modified by this hook" not in result.stdout
    # The check hook says what it cannot tell and how to settle it.
    assert "MP303" in output and "keras = 2" in output and "[tool.mpfix]" in output
