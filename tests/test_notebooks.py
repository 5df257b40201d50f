"""Notebooks: checked and fixed cell by cell, IPython syntax untouched, the rest byte for byte."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from mpfix.cli import cli
from mpfix import ipython_syntax
from mpfix.notebooks import _Cell, _Combined, mask, unmask

RELAX = "@tf.function(experimental_relax_shapes=True)"


def _notebook() -> nbformat.NotebookNode:
    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb.cells = [
        new_markdown_cell("# Training\nThe `experimental_relax_shapes` argument is mentioned in prose only."),
        new_code_cell("%matplotlib inline\nimport tensorflow as tf\n!pip install -q tf-keras"),
        new_code_cell("%%capture\n" + RELAX + "\ndef warmup(x):\n    return x", execution_count=2),
        new_code_cell(
            RELAX + "\ndef train_step(x):\n    %time y = x * 2\n    return x\ntrain_step?",
            execution_count=3,
            outputs=[new_output("stream", name="stdout", text="CPU times: user 3 µs\nWall time: 5 µs\n"),
                     new_output("display_data", data={"image/png": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"},
                                metadata={"needs_background": "light"})],
            metadata={"tags": ["keep-me"], "scrolled": True},
        ),
        new_code_cell("%%bash\necho experimental_relax_shapes"),
        new_code_cell("files = !ls\ntf.config.experimental_run_functions_eagerly(True)"),
    ]
    return nb


def _write(path: Path, nb) -> str:
    nbformat.write(nb, str(path))
    return path.read_text(encoding="utf-8")


def _mpfix(*args: str, cwd: Path):
    """Run the real CLI in ``cwd`` (in-process: one libcst import for the whole module)."""
    import os

    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, [*args, "--jobs", "1", "--no-cache"], catch_exceptions=False)
    finally:
        os.chdir(old)


def test_findings_name_the_cell_and_the_line_in_it(tmp_path):
    _write(tmp_path / "train.ipynb", _notebook())
    result = _mpfix("check", "train.ipynb", cwd=tmp_path)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if "MP30" in line]
    # Cell 3 (%%capture body) and cell 4 resolve `tf` through cell 2's import; cell 5 is bash.
    assert [line.split(": ", 1)[0] for line in lines] == [
        "train.ipynb:cell 3:2:14", "train.ipynb:cell 4:1:14", "train.ipynb:cell 6:2:1"]
    assert "MP306" in lines[0] and "MP306" in lines[1] and "MP307" in lines[2]


def test_json_output_fills_the_cell_key(tmp_path):
    _write(tmp_path / "train.ipynb", _notebook())
    result = _mpfix("check", "--format", "json", "train.ipynb", cwd=tmp_path)
    items = json.loads(result.output)
    assert [(i["cell"], i["location"]["row"], i["location"]["column"], i["code"]) for i in items] == [
        (3, 2, 14, "MP306"), (4, 1, 14, "MP306"), (6, 2, 1, "MP307")]
    edit = items[1]["fix"]["edits"][0]
    assert edit == {"content": "reduce_retracing", "location": {"row": 1, "column": 14},
                    "end_location": {"row": 1, "column": 39}}


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    old, new = before.splitlines(), after.splitlines()
    pairs = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag != "equal":
            assert tag == "replace" and i2 - i1 == j2 - j1, (old[i1:i2], new[j1:j2])
            pairs.extend(zip(old[i1:i2], new[j1:j2]))
    return pairs


def test_apply_changes_only_the_fixed_source_lines(tmp_path):
    path = tmp_path / "train.ipynb"
    before = _write(path, _notebook())
    result = _mpfix("apply", "train.ipynb", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert "Fixed 3 findings." in result.output
    after = path.read_text(encoding="utf-8")
    assert _changed_lines(before, after) == [
        (f'    "{RELAX}\\n",', '    "@tf.function(reduce_retracing=True)\\n",'),
        (f'    "{RELAX}\\n",', '    "@tf.function(reduce_retracing=True)\\n",'),
        ('    "tf.config.experimental_run_functions_eagerly(True)"', '    "tf.config.run_functions_eagerly(True)"'),
    ]
    old_nb, new_nb = json.loads(before), json.loads(after)
    for old_cell, new_cell in zip(old_nb["cells"], new_nb["cells"]):
        assert {k: v for k, v in old_cell.items() if k != "source"} == {k: v for k, v in new_cell.items() if k != "source"}
    # IPython lines come back exactly as they were.
    sources = ["".join(c["source"]) for c in new_nb["cells"]]
    assert sources[1] == "%matplotlib inline\nimport tensorflow as tf\n!pip install -q tf-keras"
    assert sources[3].endswith("    %time y = x * 2\n    return x\ntrain_step?")
    assert sources[4] == "%%bash\necho experimental_relax_shapes"
    assert sources[5].startswith("files = !ls\n")
    second = _mpfix("apply", "train.ipynb", cwd=tmp_path)
    assert second.exit_code == 0 and path.read_text(encoding="utf-8") == after
    assert _mpfix("check", "train.ipynb", cwd=tmp_path).exit_code == 0


def test_diff_shows_what_apply_would_write(tmp_path):
    path = tmp_path / "train.ipynb"
    before = _write(path, _notebook())
    result = _mpfix("diff", "train.ipynb", cwd=tmp_path)
    assert result.exit_code == 1
    assert '+    "@tf.function(reduce_retracing=True)\\n",' in result.output
    assert path.read_text(encoding="utf-8") == before


def test_other_json_layouts_are_kept(tmp_path):
    # Colab and some editors write two-space indents and keep insertion order, not sorted keys.
    nb = json.loads(nbformat.writes(_notebook()))
    nb = {"nbformat": nb["nbformat"], "nbformat_minor": nb["nbformat_minor"], "metadata": nb["metadata"],
          "cells": [{"cell_type": c["cell_type"], "source": "".join(c["source"]), "metadata": c["metadata"],
                     **({"outputs": c["outputs"], "execution_count": c["execution_count"]} if c["cell_type"] == "code" else {}),
                     "id": c["id"]} for c in nb["cells"]]}
    before = json.dumps(nb, indent=2, ensure_ascii=True)  # no newline at the end either
    path = tmp_path / "colab.ipynb"
    path.write_text(before, encoding="utf-8")
    assert _mpfix("apply", "colab.ipynb", cwd=tmp_path).exit_code == 0
    after = path.read_text(encoding="utf-8")
    assert not after.endswith("\n") and "\\u00b5" in after  # ASCII escapes of "µ" kept
    changed = _changed_lines(before, after)
    assert len(changed) == 3 and all("source" in old for old, _ in changed)
    assert "reduce_retracing" in changed[0][1] and "run_functions_eagerly(True)" in changed[2][1]


def test_a_layout_that_cannot_be_reproduced_is_not_rewritten(tmp_path):
    text = nbformat.writes(_notebook()).replace('": ', '" : ')  # hand-edited spacing
    path = tmp_path / "odd.ipynb"
    path.write_text(text, encoding="utf-8")
    result = _mpfix("apply", "odd.ipynb", cwd=tmp_path)
    assert result.exit_code == 2
    assert "not rewritten" in result.output
    assert path.read_text(encoding="utf-8") == text
    assert _mpfix("check", "odd.ipynb", cwd=tmp_path).exit_code == 1  # findings still reported


def test_a_cell_that_does_not_parse_is_reported_and_the_rest_checked(tmp_path):
    nb = _notebook()
    nb.cells.insert(2, new_code_cell("def broken(:\n    pass"))
    _write(tmp_path / "broken.ipynb", nb)
    result = _mpfix("check", "broken.ipynb", cwd=tmp_path)
    assert result.exit_code == 2
    assert "broken.ipynb:1:12: MP000 cell 3: SyntaxError" in result.output
    assert "broken.ipynb:cell 5:1:14: MP306" in result.output


def test_not_a_notebook_is_an_error_not_a_crash(tmp_path):
    (tmp_path / "bad.ipynb").write_text("{not json", encoding="utf-8")
    result = _mpfix("check", "bad.ipynb", cwd=tmp_path)
    assert result.exit_code == 2 and "not a notebook: invalid JSON" in result.output


def test_folders_are_searched_for_notebooks_but_not_checkpoints(tmp_path):
    _write(tmp_path / "train.ipynb", _notebook())
    (tmp_path / ".ipynb_checkpoints").mkdir()
    _write(tmp_path / ".ipynb_checkpoints" / "train-checkpoint.ipynb", _notebook())
    result = _mpfix("check", ".", cwd=tmp_path)
    assert result.output.count("train.ipynb:cell") == 3
    assert "checkpoint" not in result.output


def test_notebooks_are_checked_and_fixed_without_nbformat(tmp_path):
    # pre-commit's hook environment has mpfix's own dependencies only: no nbformat.
    before = _write(tmp_path / "train.ipynb", _notebook())
    code = ("import sys; sys.modules['nbformat'] = None\n"  # what `import nbformat` sees when it is not installed
            "from mpfix.cli import main; sys.argv = ['mpfix', sys.argv[1], '-j', '1', '--no-cache', 'train.ipynb']; "
            "main()")
    check = subprocess.run([sys.executable, "-c", code, "check"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "train.ipynb:cell 3:2:14: MP306" in check.stdout
    fix = subprocess.run([sys.executable, "-c", code, "apply"], cwd=tmp_path, capture_output=True, text=True)
    assert fix.returncode == 0, fix.stdout + fix.stderr
    after = (tmp_path / "train.ipynb").read_text(encoding="utf-8")
    assert after != before and "reduce_retracing=True" in after
    # Written in Jupyter's own layout: what nbformat itself writes for the fixed notebook.
    assert after == nbformat.writes(nbformat.reads(after, as_version=4)) + "\n"


@pytest.mark.parametrize("line", [
    "%time x = f()\n", "!pip install foo\n", "files = !ls\n", "a, b = %sx echo 1 2\n", "model.fit?\n",
    "??tf.function\n", "%%capture\n", "/print a b\n",
])
def test_ipython_lines_are_masked_and_restored(line):
    masked, originals = mask(line + "y = 1\n", [0])
    compile(masked, "cell", "exec")
    assert list(originals.values()) == [line]
    assert unmask(masked, originals) == line + "y = 1\n"


@pytest.mark.parametrize("source", [
    "x = (a\n     % b)\n",  # a modulo on a continuation line is Python
    's = """\n!not a shell line\n%not a magic\n"""\n',
    "print(a != b)\n",
])
def test_python_that_looks_like_ipython_is_left_alone(source):
    masked, originals = mask(source, [0])
    assert originals == {} and masked == source


def test_cells_split_back_with_an_import_inserted_above_the_first_cell():
    counter = [0]
    cells = [_Cell(1, *mask("%load_ext foo\nx = 1\n", counter), True), _Cell(3, *mask("y = 2\n", counter), True)]
    combined = _Combined(cells)
    fixed = "import tensorflow as tf\n" + combined.text.replace("y = 2", "y = 3")
    assert combined.split(fixed) == {2: "import tensorflow as tf\n%load_ext foo\nx = 1\n", 4: "y = 3\n"}
    # A fix that loses a cell marker cannot be mapped back: nothing is written.
    assert combined.split(fixed.replace("__mpfix_cell_4__\n", "")) is None


def test_interactive_review_shows_cells_and_applies_only_accepted_fixes(tmp_path):
    path = tmp_path / "train.ipynb"
    before = _write(path, _notebook())
    import os

    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, ["apply", "--interactive", "--no-cache", "train.ipynb"], input="y\nn\nn\n",
                                    catch_exceptions=False)
    finally:
        os.chdir(old)
    questions = result.output.split("Apply this fix?")
    assert len(questions) == 4, result.output
    assert "train.ipynb:cell 3:2:14: MP306" in questions[0]
    # The diff shows the code cells as a percent-format script, not the masked module.
    assert "# %% cell 3" in questions[0] and "-@tf.function(experimental_relax_shapes=True)" in questions[0]
    assert "__mpfix" not in result.output
    assert "train.ipynb:cell 4:1:14: MP306" in questions[1] and "train.ipynb:cell 6:2:1: MP307" in questions[2]
    after = path.read_text(encoding="utf-8")
    assert len(_changed_lines(before, after)) == 1
    assert "".join(json.loads(after)["cells"][2]["source"]).startswith("%%capture\n@tf.function(reduce_retracing=True)")


# -- IPython's own rules for what a line is (issue 12 #8) ---------------------------------------------

CELLS = [
    "!python train.py --a=1 \\\n  --b=2\nx = 1\n",
    "if use_gpu:\n    !nvidia-smi\nelse:\n    !echo cpu \\\n        --quiet\ny = 2\n",
    "for i in range(2):\n    %time f(i)\n",
    "files = !ls \\\n   -la\n",
    "out = %sx echo 1\n",
    "tf.function?\n",
    "tf.function??\n",
    "?tf.function\n",
    "model.layers[0]?\n",
    "f(a,\n  b)?\n",  # not a help target: IPython leaves it (and it does not compile)
    "x = (a\n     % b)\n",
    "s = '!not a command'\nt = \"\"\"\n%not a magic\n\"\"\"\n",
    "print(a != b)  # ! in a comment\n",
    "!!ls\n",
    ",f a b\n",
    ";f a b\n",
    "/f a b\n",
    "a = b = %time f()\n",
    "x == !ls\n",
    "def g():\n    return 1\n%timeit g()\n!echo done\n",
    "d = {'a': 1}\n!echo {d}\n",
    "x = 1 \\\n  + 2\n!ls\n",
    "%matplotlib inline\nimport numpy as np\n",
    "!echo a \\\n",  # a continuation at the very end of the cell
]


@pytest.mark.parametrize("cell", CELLS)
def test_own_rules_agree_with_ipython(cell):
    pytest.importorskip("IPython")
    lines = cell.splitlines(keepends=True)
    assert ipython_syntax._own_spans(lines) == ipython_syntax.spans(lines)


def test_ipython_is_what_decides_when_installed():
    pytest.importorskip("IPython")
    from IPython.core.inputtransformer2 import TransformerManager

    # Every line IPython rewrites is masked, and every line it leaves alone is kept.
    for cell in CELLS:
        masked, originals = mask(cell, [0])
        rewritten = TransformerManager().transform_cell(cell)
        assert (rewritten != cell) == bool(originals), cell
        assert unmask(masked, originals) == cell


@pytest.mark.parametrize(("cell", "masked_lines"), [
    ("!python train.py --a=1 \\\n  --b=2\nx = 1\n", [1, 2]),
    ("if ok:\n    !nvidia-smi\n    x = 1\n", [2]),
])
def test_continued_and_indented_commands_compile(cell, masked_lines):
    masked, originals = mask(cell, [0])
    compile(masked, "cell", "exec")
    lines = masked.splitlines()
    assert [n for n, line in enumerate(lines, 1) if "__mpfix_ipython_" in line] == masked_lines
    assert unmask(masked, originals) == cell


def test_a_cell_with_continued_shell_escape_is_checked(tmp_path):
    nb = new_notebook(cells=[
        new_code_cell("import tensorflow as tf\n!python train.py --a=1 \\\n  --b=2"),
        new_code_cell("if True:\n    !nvidia-smi\n@tf.function(experimental_relax_shapes=True)\ndef f(x):\n    return x"),
    ])
    _write(tmp_path / "nb.ipynb", nb)
    result = _mpfix("check", "nb.ipynb", cwd=tmp_path)
    assert result.exit_code == 1, result.output
    assert "MP000" not in result.output
    assert "nb.ipynb:cell 2:3:14: MP306" in result.output


def test_without_ipython_the_own_rules_are_used(monkeypatch):
    monkeypatch.setitem(sys.modules, "IPython", None)
    monkeypatch.setitem(sys.modules, "IPython.core", None)
    lines = "if ok:\n    !echo a \\\n      b\nx = 1\n".splitlines(keepends=True)
    assert ipython_syntax.spans(lines) == [(1, 2)]


_FRAGMENTS = [
    "!ls -la", "!!pwd", "%time f()", "%%capture", "x = !ls", "y = %sx echo 1", "obj?", "obj.attr??", "??obj",
    "/f a b", ",g a b", ";h a", "!echo a \\", "  --flag=1", "x = (1,", "     2)", "s = '''", "!not a command",
    "'''", "if ok:", "    !nvidia-smi", "    %timeit g()", "    x = 1", "else:", "    pass", "print(a != b)",
    "y = a % b", "z = [i for i in\\", "     range(3)]", "# !comment", "def f():", "    return 1", "", "   ",
    "a = b = %time f()", "x == !ls", "f(a,", " b)?", "%matplotlib inline", "d = {'k': 1}",
]


@pytest.mark.parametrize("seed", range(300))
def test_own_rules_agree_with_ipython_on_generated_cells(seed):
    pytest.importorskip("IPython")
    import random

    rng = random.Random(seed)
    from IPython.core import inputtransformer2

    cell = "".join(rng.choice(_FRAGMENTS) + "\n" for _ in range(rng.randint(1, 8)))
    lines = cell.splitlines(keepends=True)
    own = ipython_syntax._own_spans(lines)
    try:
        theirs = ipython_syntax._ipython_spans(lines, inputtransformer2)
    except SyntaxError:  # IPython cannot run this cell at all (tokenize's IndentationError)
        theirs = own
    assert own == theirs, cell
    assert ipython_syntax.spans(lines) == theirs  # and never raises
    style = ipython_syntax.ipython_cleanup_style()
    assert ipython_syntax._own_cleanup(lines, style) == ipython_syntax.cleanup(lines), cell


# -- IPython's cleanup: leading blank lines and the leading indent ------------------------------
_INDENTED = [
    " print(1)\n",
    "  \n\n   x = 1\n   y = 2\n",
    "\t\tif a:\n\t\t\tb = 1\n",
    "  if a:\n    b = 1\nc = 2\n",  # a line without the indent is left as it is
    "  x = 1\n\n  !ls\n  y = %time f()\n",
    "\n  \n  %%bash\n  echo hi\n",
    "   \n",
    "x = 1\n  \n",
]


@pytest.mark.parametrize("cell", _INDENTED)
def test_own_cleanup_agrees_with_ipython(cell, monkeypatch):
    pytest.importorskip("IPython")
    lines = cell.splitlines(keepends=True)
    theirs = ipython_syntax.cleanup(lines)
    style = ipython_syntax.ipython_cleanup_style()
    assert ipython_syntax._own_cleanup(lines, style) == theirs
    monkeypatch.setitem(sys.modules, "IPython", None)
    monkeypatch.setitem(sys.modules, "IPython.core", None)
    # Without IPython, current IPython's rules (9: textwrap.dedent of the cell).
    assert ipython_syntax.cleanup(lines) == ipython_syntax._own_cleanup(lines, "common")
    if style == "common":
        assert ipython_syntax.cleanup(lines) == theirs


@pytest.mark.parametrize("cell", _INDENTED + ["  a\n\tb\n", "    a\n  b\n    c\n", "  a\n\n  b\n"])
def test_own_common_cleanup_is_textwrap_dedent(cell):
    # IPython 9's leading_indent is textwrap.dedent of the cell; IPython 8 stripped the first line's indent.
    import textwrap

    lines = cell.splitlines(keepends=True)
    skipped, indent, dedented = ipython_syntax._own_cleanup(lines, "common")
    rest = lines[skipped:]
    expected = textwrap.dedent("".join(rest)).splitlines(keepends=True)
    assert [i - skipped for i in sorted(dedented)] == [i for i, (a, b) in enumerate(zip(rest, expected)) if a != b]
    for i, line in enumerate(rest):
        if line.strip():
            assert (line[len(indent):] if i + skipped in dedented else line) == expected[i]


@pytest.mark.parametrize("cell", [c for c in _INDENTED if "%%bash" not in c])
def test_an_indented_cell_is_masked_as_ipython_runs_it(cell):
    pytest.importorskip("IPython")
    from IPython.core.inputtransformer2 import TransformerManager

    rewritten_cell = TransformerManager().transform_cell(cell)
    try:
        compile(rewritten_cell, "cell", "exec")
    except SyntaxError:  # this IPython cannot run the cell either (IPython 9 keeps an indent not all lines share)
        assert mask(cell, [0]) is None or _does_not_compile(mask(cell, [0])[0])
        return
    masked, originals = mask(cell, [0])
    compile(masked, "cell", "exec")
    rewritten = rewritten_cell.splitlines(keepends=True)
    skipped = ipython_syntax.cleanup(cell.splitlines(keepends=True))[0]
    ours = masked.splitlines(keepends=True)[skipped:]
    # Line for line what IPython runs: a placeholder where it rewrote a line, its very line elsewhere.
    assert len(ours) == len(rewritten)
    for mine, theirs in zip(ours, rewritten):
        if "__mpfix_ipython_" in mine:
            assert "get_ipython()" in theirs
        elif mine.strip() or theirs.strip():
            assert mine == theirs
        # (a whitespace-only line may keep its spaces: IPython 9 empties it, Python ignores both)


def _does_not_compile(text: str) -> bool:
    try:
        compile(text, "cell", "exec")
    except SyntaxError:
        return True
    return False


def test_leading_blank_lines_before_a_cell_magic_skip_the_cell():
    assert mask("\n  \n%%bash\necho hi\n", [0]) is None
    assert mask("  %%bash\n  echo hi\n", [0]) is None


def test_indented_cell_is_checked_and_fixed_with_its_indent_kept(tmp_path):
    nb = new_notebook(cells=[
        new_code_cell(" import tensorflow as tf"),
        new_code_cell("\n  " + RELAX + "\n  def f(x):\n      return x\n  !echo done"),
    ])
    path = tmp_path / "nb.ipynb"
    _write(path, nb)
    result = _mpfix("check", "--format", "json", "nb.ipynb", cwd=tmp_path)
    items = json.loads(result.output)
    # Columns are those of the cell as written: the two-space indent counts.
    assert [(i["cell"], i["location"]["row"], i["location"]["column"], i["code"]) for i in items] == [
        (2, 2, 16, "MP306")]
    assert items[0]["fix"]["edits"][0]["location"] == {"row": 2, "column": 16}
    assert "MP000" not in _mpfix("check", "nb.ipynb", cwd=tmp_path).output
    applied = _mpfix("apply", "nb.ipynb", cwd=tmp_path)
    assert applied.exit_code == 0, applied.output
    sources = ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
    assert sources == [" import tensorflow as tf",
                       "\n  @tf.function(reduce_retracing=True)\n  def f(x):\n      return x\n  !echo done"]
    assert _mpfix("check", "nb.ipynb", cwd=tmp_path).exit_code == 0


def test_a_fix_that_adds_lines_to_an_indented_cell_indents_them():
    from mpfix.notebooks import reindent

    source = "  x = 1\n  y = 2"
    masked, originals = mask(source, [0])
    cell = _Cell(0, masked, originals, False, source, *ipython_syntax.cleanup(source.splitlines(keepends=True))[1:])
    text, indented = reindent(cell, "import a\nx = 1\n\ny = 3\n")
    assert text == "  import a\n  x = 1\n\n  y = 3\n"
    assert indented == {0, 1, 3}
    assert ipython_syntax.dedent(text.splitlines(keepends=True))[0] == ["import a\n", "x = 1\n", "\n", "y = 3\n"]


def test_add_noqa_in_an_indented_cell_keeps_the_indent(tmp_path):
    nb = new_notebook(cells=[new_code_cell(" import tensorflow as tf\n tf.config.experimental_run_functions_eagerly(True)")])
    path = tmp_path / "nb.ipynb"
    _write(path, nb)
    _mpfix("check", "--add-noqa", "nb.ipynb", cwd=tmp_path)
    source = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    assert source.startswith(" import tensorflow as tf\n tf.config.experimental_run_functions_eagerly(True)  # noqa: MP307")
    assert _mpfix("check", "nb.ipynb", cwd=tmp_path).exit_code == 0
