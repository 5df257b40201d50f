"""Fixing never harms code: byte-faithful round trips, validation before writing, convergence."""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner
from conftest import DEPRECATED, DEPRECATED_FIXED

from mpfix.codemods import Invalid, Rule, Valid
from mpfix.cli import cli
from mpfix.engine import Engine, Options
from mpfix.findings import FixSafety


def mpfix(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_crlf_file_keeps_crlf(project: Path):
    path = project / "train.py"
    path.write_bytes(DEPRECATED.replace("\n", "\r\n").encode())
    assert mpfix("apply", "train.py").exit_code == 0
    assert path.read_bytes() == DEPRECATED_FIXED.replace("\n", "\r\n").encode()


def test_bom_file_keeps_its_bom(project: Path):
    path = project / "train.py"
    path.write_bytes(codecs.BOM_UTF8 + DEPRECATED.encode())
    assert mpfix("apply", "train.py").exit_code == 0
    assert path.read_bytes() == codecs.BOM_UTF8 + DEPRECATED_FIXED.encode()


def test_latin1_file_keeps_its_encoding(project: Path):
    header = "# -*- coding: latin-1 -*-\n# Entraîné à la main: ½ précision\n"
    path = project / "train.py"
    path.write_bytes((header + DEPRECATED).encode("latin-1"))
    assert mpfix("apply", "train.py").exit_code == 0
    assert path.read_bytes() == (header + DEPRECATED_FIXED).encode("latin-1")


def test_file_mode_is_kept(project: Path):
    path = project / "train.py"
    path.write_text(DEPRECATED)
    os.chmod(path, 0o750)
    mpfix("apply", "train.py")
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    assert path.read_text() == DEPRECATED_FIXED
    assert [p.name for p in project.iterdir() if "mpfix-tmp" in p.name] == []


def test_only_the_fixed_span_changes(project: Path):
    # Odd but valid formatting around the finding must survive untouched.
    source = DEPRECATED.replace("def train_step(x):", "def train_step( x ) :  # spacing kept\n\n\n")
    path = project / "train.py"
    path.write_text(source)
    mpfix("apply", "train.py")
    assert path.read_text() == source.replace("experimental_relax_shapes", "reduce_retracing").replace(
        "experimental_run_functions_eagerly", "run_functions_eagerly")


# --- Engine guarantees, with deliberately broken rules (not registered) ------------------

class _BreaksCode(Rule):
    code = "MP991"
    name = "breaks-code"
    message = "test rule"
    fix_safety = FixSafety.SAFE
    triggers = ("experimental_relax_shapes",)
    VALID: list[Valid] = []
    INVALID: list[Invalid] = []

    def visit_Call(self, node: cst.Call) -> None:
        if any(a.keyword is not None and a.keyword.value == "experimental_relax_shapes" for a in node.args):
            # A repeated keyword argument parses (LibCST) but does not compile (Python).
            twice = [node.args[0].with_changes(comma=cst.Comma()), node.args[0]]
            self.report(node, fix={node: node.with_changes(args=twice)})


class _NeverSettles(Rule):
    code = "MP992"
    name = "never-settles"
    message = "test rule"
    fix_safety = FixSafety.SAFE
    triggers = ("x",)
    VALID: list[Valid] = []
    INVALID: list[Invalid] = []

    def visit_Integer(self, node: cst.Integer) -> None:
        self.report(node, fix={node: node.with_changes(value=str(int(node.value) + 1))})


class _TwoFixesSameNode(Rule):
    code = "MP993"
    name = "overlapping"
    message = "test rule"
    fix_safety = FixSafety.SAFE
    triggers = ("value",)
    VALID: list[Valid] = []
    INVALID: list[Invalid] = []

    def visit_Call(self, node: cst.Call) -> None:
        # Two fixes on nested nodes: the outer one first, the inner one on the next pass.
        if isinstance(node.func, cst.Name) and node.func.value == "value":
            self.report(node, fix={node: node.with_changes(func=cst.Name("wrapped"))})
        if isinstance(node.func, cst.Name) and node.func.value in ("value", "wrapped"):
            arg = node.args[0].value
            if isinstance(arg, cst.Integer) and arg.value == "1":
                self.report(arg, fix={arg: cst.Integer("2")})


# Both names the fixes use are bound: fix validation rejects a fix that uses an undefined name.
_DEFS = "from helpers import value, wrapped\n"


def test_a_fix_that_does_not_compile_is_never_written(tmp_path: Path):
    engine = Engine((_BreaksCode,), Options())
    result = engine.lint(DEPRECATED, tmp_path / "t.py", fix=True)
    assert result.fixed_text is None
    assert result.errors and "does not compile" in result.errors[0].message


def test_fixes_that_never_settle_are_an_error(tmp_path: Path):
    engine = Engine((_NeverSettles,), Options())
    result = engine.lint("x = 1\n", tmp_path / "t.py", fix=True)
    assert result.fixed_text is None
    assert "did not converge" in result.errors[0].message


def test_overlapping_fixes_are_applied_over_passes(tmp_path: Path):
    engine = Engine((_TwoFixesSameNode,), Options())
    result = engine.lint(_DEFS + "y = value(1)\n", tmp_path / "t.py", fix=True)
    assert not result.errors
    assert result.fixed_text == _DEFS + "y = wrapped(2)\n"
    assert result.applied == 2


def test_unsafe_fixes_need_the_flag(tmp_path: Path):
    class _Unsafe(_TwoFixesSameNode):
        code = "MP994"
        fix_safety = FixSafety.UNSAFE

    assert Engine((_Unsafe,), Options()).lint(_DEFS + "y = value(1)\n", tmp_path / "t.py", fix=True).fixed_text is None
    fixed = Engine((_Unsafe,), Options(unsafe_fixes=True)).lint(_DEFS + "y = value(1)\n", tmp_path / "t.py", fix=True)
    assert fixed.fixed_text == _DEFS + "y = wrapped(2)\n"


def test_apply_reports_internal_error_and_writes_nothing(project: Path, monkeypatch: pytest.MonkeyPatch):
    import mpfix.runner as runner

    monkeypatch.setattr(runner, "engine_for", lambda job: Engine((_BreaksCode,), job.options))
    path = project / "train.py"
    path.write_text(DEPRECATED)
    result = mpfix("apply", "train.py")
    assert result.exit_code == 2
    assert "internal error" in result.output and "nothing was written" in result.output
    assert path.read_text() == DEPRECATED
