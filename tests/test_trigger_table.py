"""The precomputed trigger table: equal to the rules' triggers, and an untriggered run imports no LibCST."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import DEPRECATED

from mpfix import selection, trigger_table
from mpfix.codemods import all_rules


def test_the_table_is_generated_from_the_installed_rules():
    # If this fails after a rule changed: python -m mpfix.trigger_table --write
    from mpfix import _trigger_data as data

    assert data.FINGERPRINT == trigger_table.rules_fingerprint(), "stale: python -m mpfix.trigger_table --write"
    expected = [(r.code, tuple(t if isinstance(t, str) else ("re", t.pattern, t.flags) for t in r.triggers),
                 tuple(r.also_requires), r.requires_float16) for r in all_rules()]
    assert list(data.RULES) == expected


def _current_table() -> trigger_table.Table:
    """The table as generated from the rules installed now (the packaged one may lag behind an edit)."""
    return trigger_table.Table([trigger_table._entry(rule) for rule in all_rules()])


@pytest.mark.parametrize("text", [
    DEPRECATED, "x = 1\n", "optimizer.get_scaled_loss(loss)\n", "def call(self, x):\n    return x.float32\n",
    "y = 1e9\n", "y = 1e-9\n", "def call(self):\n    pass\n", "\ufeffname = 'café'\n",
])
def test_the_table_answers_like_the_rules(text):
    table = _current_table()
    data = text.encode("utf-8")
    for rule in all_rules():
        assert table.may_match((rule.code,), data) == rule.may_match(text), rule.code


@pytest.mark.parametrize(("select", "ignore"), [
    (("ALL",), ()), (("MP3",), ()), (("ALL",), ("MP2",)), (("MP2",), ("MP201",)), (("MP201", "MP306"), ()),
])
def test_selection_without_the_rules_agrees_with_selection(select, ignore):
    table = _current_table()
    assert trigger_table.selected(table, select, ignore) == tuple(r.code for r in selection.select(select, ignore))


def test_unknown_codes_are_left_to_the_full_path():
    assert trigger_table.selected(_current_table(), ("MP999",), ()) is None


def _run_and_report_libcst(args: list[str], cwd) -> subprocess.CompletedProcess:
    code = ("import sys\nfrom mpfix.cli import main\nsys.argv = ['mpfix', *sys.argv[1:]]\n"
            "try:\n    main()\nfinally:\n    print('libcst imported:', 'libcst' in sys.modules, file=sys.stderr)\n")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_an_untriggered_run_does_not_import_libcst(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "plain.py").write_text("import json\n\n\ndef load(path):\n    return json.load(open(path))\n")
    (tmp_path / "nb.ipynb").write_text('{"cells": [{"cell_type": "code", "source": ["!ls\\n", "x = 1"]}], '
                                       '"metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    # Once first: if the packaged table is stale (rules edited since it was generated), this run
    # leaves a current one in the cache; the committed state is covered by the test above.
    _run_and_report_libcst(["check", "plain.py"], tmp_path)
    clean = _run_and_report_libcst(["check", "plain.py", "nb.ipynb"], tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.strip() == "All checks passed!"
    assert "libcst imported: False" in clean.stderr
    (tmp_path / "train.py").write_text(DEPRECATED)
    found = _run_and_report_libcst(["check", "--no-cache", "plain.py", "train.py"], tmp_path)
    assert found.returncode == 1 and "train.py:4:14: MP306" in found.stdout
    assert "libcst imported: True" in found.stderr
    # Triggers of float16-only rules count only where float16 can be reached.
    (tmp_path / "stats.py").write_text("def mean_square(xs):\n    return sum(x ** 2 for x in xs) / len(xs)\n")
    float32 = _run_and_report_libcst(["check", "stats.py"], tmp_path)
    assert float32.returncode == 0 and "libcst imported: False" in float32.stderr
    (tmp_path / "train_fp16.py").write_text('POLICY = "mixed_float16"\n')
    reachable = _run_and_report_libcst(["check", "stats.py"], tmp_path)
    assert reachable.returncode == 0 and "libcst imported: True" in reachable.stderr
    # A selection that excludes the triggered rules is untriggered too.
    narrowed = _run_and_report_libcst(["check", "--select", "MP2", "train.py"], tmp_path)
    assert narrowed.returncode == 0 and "libcst imported: False" in narrowed.stderr


def test_a_table_from_other_rules_is_not_used(monkeypatch):
    monkeypatch.setattr(trigger_table, "rules_fingerprint", lambda: "something else")
    assert trigger_table.load() is None


def test_generated_text_round_trips():
    namespace: dict = {}
    exec(compile(trigger_table.generate(), "_trigger_data.py", "exec"), namespace)
    assert [code for code, *_ in namespace["RULES"]] == [r.code for r in all_rules()]
    assert all(re.compile(t[1], t[2]) for _, triggers, *_ in namespace["RULES"] for t in triggers if not isinstance(t, str))


def test_a_stale_packaged_table_is_replaced_by_one_in_the_cache(tmp_path):
    # As in a checkout whose rules changed since _trigger_data.py was generated.
    (tmp_path / ".git").mkdir()
    (tmp_path / "plain.py").write_text("import json\n")
    code = ("import sys\nfrom mpfix import _trigger_data\n_trigger_data.FINGERPRINT = 'stale'\n"
            "from mpfix.cli import main\nsys.argv = ['mpfix', 'check', 'plain.py']\n"
            "try:\n    main()\nfinally:\n    print('libcst imported:', 'libcst' in sys.modules, file=sys.stderr)\n")
    cache = tmp_path / "cache"
    env = dict(os.environ, MPFIX_CACHE_DIR=str(cache))
    runs = [subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
    assert "libcst imported: True" in runs[0].stderr  # the full path, which leaves a table behind
    (table,) = (cache / "triggers").glob("*.json")
    assert table.stem == trigger_table.rules_fingerprint()
    assert (cache / ".gitignore").exists()
    assert "libcst imported: False" in runs[1].stderr
    assert trigger_table.from_cache(cache).codes == tuple(r.code for r in all_rules())
