"""A script that does not compile crashes at its own line: the SyntaxError's file and line
are the crash's place (its traceback ends in runpy, which holds no user frame). Real
bootstrap children; no TensorFlow is imported."""

from __future__ import annotations

from mpfix.verify.run import verify


def test_a_syntax_error_is_placed_at_its_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import os\n\ndef step(x:\n    return x\n", encoding="utf-8")
    report = verify(script, [], steps=2, device="cpu", timeout=60)
    v = report.verdict
    assert v.name == "crashed" and report.exit_code == 14, v.summary
    assert v.evidence["at"] == "train.py:3: def step(x:", v.evidence
    assert v.summary.startswith("SyntaxError: "), v.summary


def test_a_syntax_error_in_an_imported_module_is_placed_there(tmp_path):
    (tmp_path / "helpers.py").write_text("def f():\nreturn 1\n", encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text("import helpers\n", encoding="utf-8")
    report = verify(script, [], steps=2, device="cpu", timeout=60)
    v = report.verdict
    assert v.name == "crashed" and v.evidence["type"] == "IndentationError", v.summary
    assert v.evidence["at"].startswith("helpers.py:2: return 1"), v.evidence
