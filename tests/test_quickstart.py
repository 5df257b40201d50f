"""The README's first command, in a fresh virtualenv, prints what the README shows.

The virtualenv sees the system's site-packages so TensorFlow (hundreds of MB) is not
downloaded again; mpfix itself and its own dependencies are installed into it by the
README's command, from a snapshot of this checkout (what a fresh clone would hold).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from test_readme import README, commands, section

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _snapshot(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def test_first_command_in_a_fresh_virtualenv(tmp_path):
    text = README.read_text(encoding="utf-8")
    first = commands(section(text, "Quickstart"))[0].line
    shown = next(c.output for c in commands(section(text, "Walkthrough")) if c.line == "mpfix check samples/")
    assert first.endswith("&& mpfix check samples/")

    checkout = tmp_path / "clone"
    _snapshot(checkout)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True, clear=True).create(env_dir)
    bin_dir = env_dir / ("Scripts" if sys.platform == "win32" else "bin")
    env = dict(os.environ, VIRTUAL_ENV=str(env_dir), PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    result = subprocess.run(["bash", "-c", first], cwd=checkout, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]  # 1: the samples have findings
    # The mpfix that ran is the one installed into the virtualenv, from the snapshot.
    where = subprocess.run([str(bin_dir / "python"), "-c", "import mpfix, sys; print(mpfix.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert where.stdout.strip().startswith(str(checkout)), where.stdout + where.stderr
    assert (bin_dir / "mpfix").exists()
    assert result.stdout.endswith(shown), result.stdout[-3000:]
