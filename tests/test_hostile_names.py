"""A hostile file name reaches no terminal or CI log raw, whatever the command or option.

A repository may hold a file named ``a<newline>fake.py:1:1: MP999 forged<ESC>[31m.py``. Printed raw,
its newline starts a forged ``path:line:col: CODE`` line (what CI problem matchers read) and its
escape sequence drives the terminal. Every path shown goes through ``mpfix.display.display_path``,
which escapes control characters as git quotes them; GitHub annotations keep their own
property escaping (``%0A``, ``%3A``, ``%2C``) on top.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DEPRECATED

from mpfix.cli import cli
from mpfix.display import display_path, printable

NAME = "a\nfake.py:1:1: MP999 forged\x1b[31m.py"
SHOWN = "a\\nfake.py:1:1: MP999 forged\\x1b[31m.py"


def _run(*args: str, input: str | None = None) -> str:
    result = CliRunner().invoke(cli, list(args), input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.output


def _assert_clean(output: str) -> None:
    assert "\x1b" not in output
    assert not any(line.startswith("fake.py") for line in output.splitlines()), output


@pytest.fixture
def hostile(project: Path) -> Path:
    (project / NAME).write_text(DEPRECATED)
    return project


def test_display_path_escapes_control_characters():
    assert display_path(NAME) == SHOWN
    assert printable(SHOWN) == SHOWN  # idempotent: a backslash is printable
    assert display_path("plain/ü.py") == "plain/ü.py"


def test_verbose_target_and_policy_lines(hostile: Path):
    output = _run("check", "--verbose", ".")
    assert "Keras" in output and "float16 reachability" in output
    assert SHOWN in output
    _assert_clean(output)


def test_verbose_policy_line_of_a_reached_file(hostile: Path):
    (hostile / NAME).write_text("from tensorflow.keras import mixed_precision\n"
                                "mixed_precision.set_global_policy('mixed_float16')\n" + DEPRECATED)
    output = _run("check", "--verbose", ".")
    assert f"  {SHOWN}: mixed_float16" in output
    _assert_clean(output)


def test_no_files_warning(project: Path):
    folder = project / NAME.replace(".py", "")
    folder.mkdir()
    output = _run("check", str(folder.relative_to(project)))
    assert "no Python files found" in output
    _assert_clean(output)


def test_diff_headers(hostile: Path):
    output = _run("diff", ".")
    assert f"--- a/{SHOWN}" in output and f"+++ b/{SHOWN}" in output
    _assert_clean(output)


def test_add_noqa_messages(hostile: Path):
    output = _run("check", "--add-noqa", ".")
    assert "Added" in output
    _assert_clean(output)


def test_interactive_apply(hostile: Path):
    output = _run("apply", "-i", ".", input="n\nn\nn\n")
    assert SHOWN in output
    _assert_clean(output)


def test_github_file_property_escapes_control_characters(hostile: Path):
    output = _run("check", "--format", "github", ".")
    _assert_clean(output)
    errors = [line for line in output.splitlines() if line.startswith("::error")]
    assert len(errors) == 2  # MP306 and MP307, one line each
    assert all("file=a%0Afake.py%3A1%3A1%3A MP999 forged\\x1b[31m.py," in line for line in errors)


@pytest.mark.parametrize("command", [("check",), ("apply", "--fix-only"), ("diff",)])
def test_unreadable_file_error_line(hostile: Path, command: tuple[str, ...]):
    (hostile / NAME).write_bytes(DEPRECATED.encode() + b"x = '\xff'\n")
    output = _run(*command, ".")
    assert f"{SHOWN}:10:6: MP000 cannot decode" in output
    _assert_clean(output)


@pytest.mark.parametrize("content", [DEPRECATED + "def broken(:\n", "# coding: klingon\n"])
def test_instrument_error_lines(hostile: Path, content: str):
    from mpfix.verify.instrument import instrument

    (hostile / NAME).write_text(content)
    result = CliRunner().invoke(instrument, [NAME])
    assert result.exit_code == 2 and result.output.startswith(f"{SHOWN}:"), result.output
    _assert_clean(result.output)


def test_instrument_diff_headers(hostile: Path):
    from mpfix.verify.instrument import instrument

    (hostile / NAME).write_text("import tensorflow as tf\n\nwith tf.GradientTape() as tape:\n    loss = model(x)\n"
                                "scaled = optimizer.get_scaled_loss(loss)\n")
    output = CliRunner().invoke(instrument, [NAME]).output
    _assert_clean(output)


def test_repair_diff_headers(tmp_path: Path):
    """``mpfix repair`` prints its edits as a diff of the project's files, whose names a stranger chose."""
    from types import SimpleNamespace

    from mpfix.verify import report_repair

    result = SimpleNamespace(texts={tmp_path / NAME: ("x = 1\n", "x = 2\n")})
    output = report_repair.diff(result, tmp_path)
    assert f"--- a/{SHOWN}" in output and f"+++ b/{SHOWN}" in output
    _assert_clean(output)


@pytest.mark.parametrize("command", [("check",), ("check", "--format", "full"), ("check", "--format", "github"),
                                     ("apply", "--fix-only"), ("diff",), ("check", "--add-noqa")])
def test_a_symlink_target_in_an_error_message_cannot_forge_a_line(project: Path, command: tuple[str, ...]):
    """MP000 messages quote what a stranger chose too: 'symbolic link to <target> outside the project'
    printed the link's target raw, so a target holding a newline forged a 'path:line:col: CODE' line."""
    (project / "evil.py").symlink_to(str(project.parent / "out\nfake.py:1:1: MP999 forged\x1b]0;x\x07.py"))
    (project / "ok.py").write_text(DEPRECATED)
    output = _run(*command, ".")
    assert "evil.py" in output and "MP000" in output
    assert "out\\nfake.py:1:1: MP999 forged\\x1b]0;x\\x07.py" in output
    _assert_clean(output)
    assert "\x07" not in output


def test_verbose_why_naming_a_hostile_entry_point(project: Path):
    """The policy line's reason names the project's entry points, whose names a stranger chose."""
    (project / NAME).write_text("from tensorflow.keras import mixed_precision\n"
                                "mixed_precision.set_global_policy('mixed_float16')\n"
                                "if __name__ == '__main__':\n    pass\n")
    (project / "lib.py").write_text(DEPRECATED)
    output = _run("check", "--verbose", ".")
    assert SHOWN in output
    _assert_clean(output)
