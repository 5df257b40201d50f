"""Turn 14 fuzz round, notebooks: a notebook whose kernel is not Python (R, Julia) holds no Python, as Ruff
reads it (``language_info.name``); mpfix compiled its cells as Python, so a project with R notebooks
next to its TensorFlow code got "SyntaxError; cell not checked" for each, and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

R_CELL = ["library(tensorflow)\n", "tf$keras$mixed_precision$set_global_policy('mixed_float16')\n",
          "opt <- tf$keras$optimizers$Adam()\n"]
PY_CELL = ["import tensorflow as tf\n", "\n", "\n", "@tf.function(experimental_relax_shapes=True)\n",
           "def f(x):\n", "    return x\n"]


def _notebook(path: Path, source: list[str], metadata: dict) -> bytes:
    data = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}],
            "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path.read_bytes()


def _mpfix(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpfix", *argv], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("metadata", [
    {"kernelspec": {"display_name": "R", "language": "R", "name": "ir"}, "language_info": {"name": "R"}},
    {"kernelspec": {"display_name": "Julia 1.9", "language": "julia", "name": "julia-1.9"}},
])
def test_a_notebook_in_another_language_is_not_checked_as_python(tmp_path: Path, metadata: dict):
    other = _notebook(tmp_path / "other.ipynb", R_CELL, metadata)
    _notebook(tmp_path / "python.ipynb", PY_CELL, {"kernelspec": {"language": "python", "name": "python3"},
                                                  "language_info": {"name": "python"}})
    checked = _mpfix("check", "--no-cache", ".", cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "other.ipynb" not in checked.stdout + checked.stderr
    assert "python.ipynb:cell 1:4:14: MP306" in checked.stdout  # the Python notebook next to it is still checked
    applied = _mpfix("apply", "--unsafe-fixes", "--no-cache", ".", cwd=tmp_path)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (tmp_path / "other.ipynb").read_bytes() == other
    assert "reduce_retracing" in (tmp_path / "python.ipynb").read_text()
