"""IPython automagic in notebook cells (issue 20): ``pip install x``, ``cd data``, ``ls ./data`` without
the ``%`` run as line magics in Jupyter, so they are IPython syntax, never an MP000.

IPython applies automagic only to a one-line cell whose first word is a line magic or alias not
shadowed by a Python name or assigned to; these tests hold ``mpfix.ipython_syntax`` to the installed
IPython's own answer on the same cells.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mpfix import ipython_syntax
from mpfix.cli import cli

CELLS = [
    "pip install tensorflow", "pip install -q tf-keras==2.15", "cd data", "cd ..", "ls", "ls -la",
    "ls ./data/train/", "mkdir -p out/x", "cat file.txt", "pwd", "env", "who", "history -n 5",
    "  cd ..",  # the leading indent goes in IPython's cleanup first
    "conda install numpy", "timeit x = 1", "time x = 1",
    # not automagic:
    "ls = 5", "ls, x = 1, 2", "print(1)", "time.sleep(1)", "x = 1", "pip", "len x",
    "pip install x\nimport os",  # two lines: no automagic (and not valid IPython either)
    "for x in y: pass", "import os", "",
]


def _ipython_runs_as_magic(cell: str) -> bool:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    return "run_line_magic(" in shell.transform_cell(cell) and "%" not in cell


@pytest.mark.parametrize("cell", CELLS)
def test_automagic_agrees_with_ipython(cell: str):
    pytest.importorskip("IPython")
    lines = cell.splitlines(keepends=True)
    cleaned, _, _ = ipython_syntax.dedent(lines)
    assert ipython_syntax.automagic(cleaned, frozenset()) == _ipython_runs_as_magic(cell)


def test_every_line_magic_and_alias_of_the_installed_ipython_is_known():
    pytest.importorskip("IPython")
    from IPython.core.alias import default_aliases
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    names = set(shell.magics_manager.magics["line"]) | {name for name, _ in default_aliases()}
    assert names <= ipython_syntax.AUTOMAGIC_NAMES, sorted(names - ipython_syntax.AUTOMAGIC_NAMES)


def test_a_name_the_notebook_binds_shadows_the_magic():
    assert ipython_syntax.automagic(["run(model)"], frozenset())  # IPython: %run (model)
    assert not ipython_syntax.automagic(["run(model)"], frozenset({"run"}))  # the user's run()
    # Without the notebook's names, valid Python stays Python; only what cannot be Python is a magic.
    assert not ipython_syntax.automagic(["run(model)"])
    assert ipython_syntax.automagic(["pip install -q tf-keras"])


def test_automagic_cells_are_no_mp000(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook()
    nb.cells = [new_code_cell("pip install -q tf-keras"), new_code_cell("cd data"),
                new_code_cell("ls ./data/train/"),
                new_code_cell("import tensorflow as tf\ntf.config.experimental_run_functions_eagerly(True)")]
    nbformat.write(nb, str(tmp_path / "nb.ipynb"))
    result = CliRunner().invoke(cli, ["check", "--no-cache", "-j", "1", str(tmp_path / "nb.ipynb")])
    assert "MP000" not in result.output, result.output
    assert "MP307" in result.output  # the Python cells are still checked
    # A two-line cell starting with an unescaped magic is not valid IPython: still reported.
    nb.cells.append(new_code_cell("pip install x\nimport os"))
    nbformat.write(nb, str(tmp_path / "nb.ipynb"))
    result = CliRunner().invoke(cli, ["check", "--no-cache", "-j", "1", str(tmp_path / "nb.ipynb")])
    assert "MP000" in result.output
