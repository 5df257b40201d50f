"""The command line end to end: exit codes, output lines, what is and is not written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DEPRECATED, DEPRECATED_FIXED

from mpfix.codemods import all_rules
from mpfix.cli import cli


def mpfix(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def test_check_reports_findings_and_exits_1(project: Path):
    (project / "train.py").write_text(DEPRECATED)
    result = mpfix("check", "train.py")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert "train.py:4:14: MP306 [*] `tf.function(experimental_relax_shapes=...)` is deprecated; use `reduce_retracing=...`" in lines
    assert any(line.startswith("train.py:9:1: MP307 [*] ") for line in lines)
    assert "Found 2 findings (2 fixable with `mpfix apply`)." in lines


def test_check_clean_file_exits_0(project: Path):
    (project / "clean.py").write_text(DEPRECATED_FIXED)
    result = mpfix("check", "clean.py")
    assert result.exit_code == 0
    assert result.output.strip() == "All checks passed!"


def test_syntax_error_exits_2_and_other_files_are_still_checked(project: Path):
    (project / "broken.py").write_text("import tensorflow as tf\n@tf.function(experimental_relax_shapes=True\ndef f(:\n")
    (project / "train.py").write_text(DEPRECATED)
    result = mpfix("check", ".")
    assert result.exit_code == 2
    assert any(line.startswith("broken.py:3:") and "MP000 SyntaxError" in line for line in result.output.splitlines())
    assert "train.py:4:14: MP306" in result.output


def test_python2_file_gets_a_hint(project: Path):
    (project / "old.py").write_text("import tensorflow as tf\nprint 'experimental_relax_shapes'\n")
    result = mpfix("check", "old.py")
    assert result.exit_code == 2
    assert "looks like Python 2" in result.output


def test_missing_path_is_an_error(project: Path):
    result = mpfix("check", "nope.py")
    assert result.exit_code == 2
    assert "nope.py:1:1: MP000 no such file or directory" in result.output


def test_diff_writes_nothing_and_exits_1(project: Path):
    path = project / "train.py"
    path.write_text(DEPRECATED)
    result = mpfix("diff", "train.py")
    assert result.exit_code == 1
    assert "-@tf.function(experimental_relax_shapes=True)" in result.output
    assert "+@tf.function(reduce_retracing=True)" in result.output
    assert "--- a/train.py" in result.output
    assert path.read_text() == DEPRECATED


def test_diff_without_changes_exits_0(project: Path):
    (project / "clean.py").write_text(DEPRECATED_FIXED)
    assert mpfix("diff", "clean.py").exit_code == 0


def test_apply_fixes_then_second_apply_changes_nothing(project: Path):
    path = project / "train.py"
    path.write_text(DEPRECATED)
    first = mpfix("apply", "train.py")
    assert first.exit_code == 0, first.output
    assert "Fixed 2 findings." in first.output
    assert path.read_text() == DEPRECATED_FIXED
    mtime = path.stat().st_mtime_ns
    second = mpfix("apply", "train.py", "--exit-non-zero-on-fix")
    assert second.exit_code == 0
    assert path.stat().st_mtime_ns == mtime


def test_apply_exit_non_zero_on_fix(project: Path):
    (project / "train.py").write_text(DEPRECATED)
    assert mpfix("apply", "--exit-non-zero-on-fix", "train.py").exit_code == 1


def test_select_and_ignore(project: Path):
    (project / "train.py").write_text(DEPRECATED)
    only_306 = mpfix("check", "--select", "MP306", "train.py")
    assert "MP306" in only_306.output and "MP307" not in only_306.output
    ignored = mpfix("check", "--ignore", "MP30", "train.py")
    assert ignored.exit_code == 0
    prefix_then_specific = mpfix("check", "--select", "MP3", "--ignore", "MP307", "train.py")
    assert "MP306" in prefix_then_specific.output and "MP307" not in prefix_then_specific.output


def test_unknown_code_is_a_usage_error_listing_valid_codes(project: Path):
    (project / "train.py").write_text(DEPRECATED)
    result = CliRunner().invoke(cli, ["check", "--select", "MP999", "train.py"])
    assert result.exit_code == 2
    assert "unknown rule code(s): MP999" in result.output
    assert "MP306" in result.output


def test_exit_zero_and_quiet(project: Path):
    (project / "train.py").write_text(DEPRECATED)
    result = mpfix("check", "--exit-zero", "--quiet", "train.py")
    assert result.exit_code == 0
    assert "Found" not in result.output
    assert result.output.count("\n") == 2


def test_rules_lists_every_rule():
    result = mpfix("rules")
    assert result.exit_code == 0
    for rule in all_rules():
        assert rule.code in result.output and rule.name in result.output
    listed = json.loads(mpfix("rules", "--format", "json").output)
    assert [r["code"] for r in listed] == [r.code for r in all_rules()]


def test_explain_prints_the_rule_doc():
    result = mpfix("explain", "MP306")
    assert result.exit_code == 0
    assert "relax-shapes (MP306)" in result.output
    assert "## Why is this bad?" in result.output
    assert "reduce_retracing=True" in result.output
    bad = CliRunner().invoke(cli, ["explain", "MP999"])
    assert bad.exit_code == 2 and "valid codes" in bad.output


def test_explain_mp000_says_what_an_unchecked_file_means():
    # MP000 is in every output (JSON url, SARIF rule, exit 2); `explain` must not call it unknown.
    result = mpfix("explain", "mp000")
    assert result.exit_code == 0, result.output
    assert "file-not-checked (MP000)" in result.output and "Not a rule" in result.output
    assert "syntax error" in result.output and "`exclude`" in result.output


def test_check_does_not_import_tensorflow(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text(DEPRECATED)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "mpfix", "check", str(path)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "libcst" in imported  # the measurement works
    heavy = {name for name in imported if name.split(".")[0] in {"tensorflow", "keras", "tf_keras", "numpy", "jax", "torch"}}
    assert heavy == set()


def test_python_dash_m_entry_point(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "mpfix", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and "mpfix, version" in proc.stdout


@pytest.mark.parametrize("flag", ["--unsafe-fixes", "--no-unsafe-fixes"])
def test_unsafe_fix_flags_are_accepted(project: Path, flag: str):
    (project / "train.py").write_text(DEPRECATED)
    assert mpfix("check", flag, "train.py").exit_code == 1
