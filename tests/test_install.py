"""What ``pip install mpfix`` puts into an environment (issue 15, defects 1 and 6).

* The distribution adds exactly one top-level package, ``mpfix`` (the rules folder
  ``codemods/`` is installed as ``mpfix.codemods``): checked on a real, non-editable
  wheel installed into a fresh virtualenv.
* ``mpfix[verify]`` (the user-facing extra) never installs a TensorFlow, Keras or
  tf-keras distribution: ``verify`` runs the user's script with the user's TensorFlow
  (``--python``), and a ``tensorflow-cpu`` pulled in by mpfix would overwrite a GPU
  build's files. Checked with pip's own resolver (``--dry-run --report``) against the
  package index, ignoring what is installed here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TF_LIKE = ("tensorflow", "tf-keras", "tf_keras", "keras", "tf-nightly", "intel-tensorflow")


def _snapshot(dest: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _is_tf_like(name: str) -> bool:
    name = name.lower().replace("_", "-")
    return name in TF_LIKE or name.startswith(("tensorflow", "tf-"))


def test_wheel_installs_only_the_mpfix_package(tmp_path):
    checkout = _snapshot(tmp_path / "clone")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(checkout)], check=True, capture_output=True, timeout=600)
    (wheel,) = (tmp_path / "dist").glob("mpfix-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"mpfix"}, sorted(top)
    assert "mpfix/codemods/__init__.py" in names and "mpfix/codemods/base.py" in names
    # Every package of the source tree is in the wheel (a missing subpackage only shows once installed).
    for init in [*(checkout / "mpfix").rglob("__init__.py"), *(checkout / "codemods").rglob("__init__.py")]:
        relative = init.relative_to(checkout).as_posix()
        installed = relative if relative.startswith("mpfix/") else f"mpfix/{relative}"
        assert installed in names, f"{relative} is not installed"

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env_dir)
    python = env_dir / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=600)
    probe = ("import importlib.metadata as m, mpfix, mpfix.codemods, sys\n"
             "files = m.distribution('mpfix').files\n"
             "tops = {f.parts[0] for f in files if f.parts[0] != '..' and not f.parts[0].endswith('.dist-info')}\n"
             "print(sorted(tops)); print(mpfix.__file__); print(len(mpfix.codemods.all_rules()))\n"
             "try:\n    import codemods\nexcept ImportError:\n    print('no-codemods')\n")
    # Run from an empty folder: the checkout's own folders must not be what is imported.
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run([str(python), "-c", probe], cwd=tmp_path, env=clean_env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    tops, where, count, codemods = out.stdout.split("\n")[:4]
    assert tops == "['mpfix']"
    assert where.startswith(str(env_dir))
    assert int(count) > 10
    assert codemods == "no-codemods"


def test_verify_extra_installs_no_tensorflow(tmp_path):
    checkout = _snapshot(tmp_path / "clone")
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
         "--report", str(report), f"{checkout}[verify]"],
        capture_output=True, text=True, timeout=600)
    if result.returncode != 0 and "No matching distribution" in result.stderr:
        pytest.skip(f"the package index is not reachable: {result.stderr[-500:]}")
    assert result.returncode == 0, result.stderr[-3000:]
    names = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert "mpfix" in names and "libcst" in names  # the resolver did resolve the whole tree
    assert [n for n in names if _is_tf_like(n)] == [], names


def test_test_extra_still_brings_tensorflow_for_ci():
    # The negative control of the check above: the same resolver logic would see these.
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(_is_tf_like(r.split(">")[0].split("=")[0]) for r in extras["test"])
    assert not any(_is_tf_like(r.split(">")[0].split("=")[0].split("[")[0]) for r in extras["verify"])
