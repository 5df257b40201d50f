"""``mpfix check --add-noqa`` (Ruff's behaviour) and ``mpfix check --statistics``."""

from __future__ import annotations

import codecs
import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from mpfix.cli import cli
from mpfix.findings import Finding, Position
from mpfix.noqa import add_noqa_to_text

POLICY = 'tf.keras.mixed_precision.experimental.Policy("mixed_float16")'  # MP301, a safe fix


def _check(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["check", "--no-cache", *args])
    return result.exit_code, result.stdout, result.stderr


def _finding(code: str, line: int, end_line: int | None = None) -> Finding:
    return Finding(code=code, message="m", filename="x.py", start=Position(line, 1),
                   end=Position(end_line or line, 2))


LEGACY = (
    "import tensorflow as tf\n"
    f"a = {POLICY}\n"
    f"b = {POLICY}  # noqa: E501,MP999\n"
    f"c = {POLICY}  # keep this comment\n"
    f"d = {POLICY}  # noqa: MP301\n"
    "e = tf.function(len, experimental_relax_shapes='''\n"
    "''')\n"
    f"f = ({POLICY},\n"
    "     1)\n"
    "@tf.function(experimental_relax_shapes=True)\n"
    "def g(x):\n"
    "    return x\n"
)


def test_add_noqa_round_trip_is_idempotent_and_keeps_existing_codes(tmp_path):
    path = tmp_path / "legacy.py"
    path.write_bytes(codecs.BOM_UTF8 + LEGACY.replace("\n", "\r\n").encode("utf-8"))
    code, out, _ = _check(str(path))
    assert code == 1 and out.count("MP301") == 4 and out.count("MP306") == 2

    code, out, err = _check("--add-noqa", str(path))
    assert code == 0, err
    assert "Added 6 noqa directives." in err
    assert out == ""  # findings are not listed
    data = path.read_bytes()
    assert data.startswith(codecs.BOM_UTF8) and b"\r\n" in data and data.count(b"\n") == data.count(b"\r\n")
    lines = data[3:].decode("utf-8").splitlines()
    assert lines[1].endswith(f"{POLICY}  # noqa: MP301")
    assert lines[2].endswith("  # noqa: E501, MP301, MP999")  # merged, sorted, no duplicates
    assert lines[3].endswith("  # keep this comment  # noqa: MP301")
    assert lines[4].endswith("  # noqa: MP301")  # already suppressed: unchanged
    assert lines[5] == "e = tf.function(len, experimental_relax_shapes='''"  # never inside the string:
    assert lines[6] == "''')  # noqa: MP306"  # the finding's last line takes it
    assert lines[7].endswith(",  # noqa: MP301") and lines[8] == "     1)"
    assert lines[9].endswith("(experimental_relax_shapes=True)  # noqa: MP306")

    code, out, err = _check(str(path))
    assert (code, out.strip()) == (0, "All checks passed!")
    before = path.read_bytes()
    code, _, err = _check("--add-noqa", str(path))
    assert code == 0 and "Added 0 noqa directives." in err
    assert path.read_bytes() == before


def test_a_line_that_cannot_hold_a_comment_is_skipped_with_a_message(tmp_path):
    # The finding starts and ends on lines continued by a backslash or inside a string.
    text = f"import tensorflow as tf\nx = 1 + \\\n    {POLICY}.compute_dtype + '''\n'''\n"
    new, added, messages = add_noqa_to_text(text, [_finding("MP301", 3)], "t.py")
    assert (new, added) == (text, 0)
    assert messages == ["t.py:3:1: MP301: no noqa directive added (its lines end inside a string or a line continuation)"]


def test_merge_codes_on_one_line_and_bare_noqa():
    text = "x = 1\ny = 2  # noqa\nz = 3  # NOQA:MP201\n"
    new, added, _ = add_noqa_to_text(text, [_finding("MP302", 1), _finding("MP201", 1), _finding("MP999", 2),
                                            _finding("MP105", 3), _finding("MP201", 3)])
    assert added == 2
    assert new == "x = 1  # noqa: MP201, MP302\ny = 2  # noqa\nz = 3  # noqa: MP105, MP201\n"


def test_form_feed_does_not_shift_lines():
    text = "a = 1\x0c  # page\nb = 2\n"
    new, added, _ = add_noqa_to_text(text, [_finding("MP201", 2)])
    assert added == 1 and new == "a = 1\x0c  # page\nb = 2  # noqa: MP201\n"


def test_statistics_text_and_json(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(LEGACY, encoding="utf-8")
    code, out, _ = _check("--statistics", str(path))
    assert code == 1
    assert out.splitlines() == ["4\tMP301\t[*] experimental-mixed-precision-api",
                                "2\tMP306\t[*] relax-shapes"]
    code, out, _ = _check("--statistics", "--format", "json", str(path))
    assert code == 1
    assert json.loads(out) == [
        {"code": "MP301", "name": "experimental-mixed-precision-api", "count": 4, "fixable": True, "fixable_count": 4},
        {"code": "MP306", "name": "relax-shapes", "count": 2, "fixable": True, "fixable_count": 2},
    ]
    code, out, _ = _check("--statistics", "--exit-zero", str(tmp_path / "m.py"))
    assert code == 0 and out
    code, _, err = _check("--statistics", "--format", "sarif", str(path))
    assert code == 2 and "--statistics works with --format text or json" in err


def test_statistics_orders_by_count_and_marks_unfixable(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "import tensorflow as tf\n"
        "tf.keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "opt = tf.keras.optimizers.Adam()\n"
        "strategy = tf.distribute.MirroredStrategy()\n"
        "with strategy.scope():\n"
        "    model = tf.keras.Sequential([tf.keras.layers.Dense(1, dtype='float32')])\n"
        "model.compile(optimizer=opt, loss='mse')\n"
        "@tf.function(experimental_relax_shapes=True)\n"
        "def g(x):\n"
        "    return x\n"
        "h = tf.function(g, experimental_relax_shapes=True)\n", encoding="utf-8")
    code, out, _ = _check("--statistics", str(path))
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0] == ["2", "MP306", "[*] relax-shapes"]
    assert ["1", "MP106", "[ ] optimizer-outside-strategy-scope"] in rows


def test_add_noqa_in_notebook_cells(tmp_path):
    def cell(kind, source):
        extra = {"execution_count": None, "outputs": []} if kind == "code" else {}
        return {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True), **extra}

    notebook = {"cells": [cell("markdown", "# title"), cell("code", "%matplotlib inline\nimport tensorflow as tf"),
                          cell("code", f"p = {POLICY}\nprint(p)")],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    code, out, _ = _check(str(path))
    assert code == 1 and "cell 3:1" in out
    code, _, err = _check("--add-noqa", str(path))
    assert code == 0 and "Added 1 noqa directive." in err
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["cells"][2]["source"] == [f"p = {POLICY}  # noqa: MP301\n", "print(p)"]
    assert written["cells"][1]["source"] == ["%matplotlib inline\n", "import tensorflow as tf"]
    notebook["cells"][2]["source"] = written["cells"][2]["source"]
    assert written == notebook  # only that cell's source changed
    assert _check(str(path))[0] == 0


def test_add_noqa_never_imports_tensorflow(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(LEGACY, encoding="utf-8")
    script = ("import sys\nfrom mpfix.cli import cli\n"
              "try:\n    cli(['check', '--no-cache', '--add-noqa', sys.argv[1]])\n"
              "except SystemExit as e:\n    code = e.code\n"
              "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\nprint('exit', code)\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.strip() == "exit 0", done.stderr
    assert "# noqa: MP301" in path.read_text(encoding="utf-8")


def test_every_rule_example_round_trips():
    """The INVALID examples of every rule, both generations: after add-noqa nothing is reported, and a
    second pass adds nothing (multi-line calls, decorators, strings and comments of real rule examples)."""
    import textwrap

    from mpfix.codemods import all_rules
    from mpfix.testing import lint_snippet

    checked = 0
    for rule in all_rules():
        for example in rule.INVALID:
            for keras in ([example.keras] if example.keras else (2, 3)):
                text = textwrap.dedent(example.code).lstrip("\n")
                before = lint_snippet(text, keras=keras, policy=example.policy)
                if before.errors or not before.findings:
                    continue
                new, added, messages = add_noqa_to_text(text, before.findings)
                assert added and not messages, (rule.code, messages)
                after = lint_snippet(new, keras=keras, policy=example.policy)
                assert (after.errors, after.findings) == ([], []), (rule.code, keras, new)
                assert add_noqa_to_text(new, after.findings)[:2] == (new, 0)
                checked += 1
    assert checked >= len(all_rules())
