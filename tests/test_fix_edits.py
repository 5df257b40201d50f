"""JSON edits and fix validation are linear in the number of fixes (issue 21 item 3): all fixes are
applied and validated together, bisected only when that fails; each fix keeps its own edits."""

from __future__ import annotations

from pathlib import Path

from mpfix import api, fix_edits, fix_validation

FINDING = "@tf.function(experimental_relax_shapes=True)\ndef step_{i}(x):\n    return x\n\n\n"


def _text(count: int) -> str:
    return "import tensorflow as tf\n\n\n" + "".join(FINDING.format(i=i) for i in range(count))


def _count_validations(monkeypatch) -> list[int]:
    calls = [0]
    real = fix_validation.Validator.problem

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(fix_validation.Validator, "problem", counted)
    return calls


def test_edits_of_many_fixes_cost_one_validation(tmp_path: Path, monkeypatch):
    calls = _count_validations(monkeypatch)
    result = api.lint_text(_text(120), tmp_path / "many.py")
    assert len(result.findings) == 120
    assert calls[0] <= 2  # was 120: one per fix
    for i, finding in enumerate(result.findings):
        (edit,) = finding.edits
        assert (edit.start.line, edit.content) == (4 + 5 * i, "reduce_retracing")


def test_a_fix_that_fails_validation_is_found_by_bisection(tmp_path: Path, monkeypatch):
    calls = _count_validations(monkeypatch)
    real = fix_validation.Validator.problem
    bad_line = "def step_37(x):"

    def problem(self, fixed, module=None):
        # A validator that rejects any text where step_37's decorator was fixed.
        lines = fixed.splitlines()
        index = lines.index(bad_line)
        if "reduce_retracing" in lines[index - 1]:
            return "rejected for the test"
        return real(self, fixed, module)

    monkeypatch.setattr(fix_validation.Validator, "problem", problem)
    result = api.lint_text(_text(64), tmp_path / "many.py")
    withheld = [f for f in result.findings if f.fix is None]
    assert [f.line for f in withheld] == [4 + 5 * 37]
    assert "rejected for the test" in withheld[0].message
    assert all(f.edits for f in result.findings if f.fix is not None)
    assert calls[0] <= 2 + 2 * 6  # one combined check, two halves per level of log2(64), a final one; was 64


def test_blame_needs_log_n_checks_per_culprit():
    checks = []

    def problem_of(group):
        checks.append(len(group))
        return "bad" if 700 in group else None

    assert fix_edits.blame(list(range(1024)), problem_of, "bad") == {700: "bad"}
    assert len(checks) == 20  # two halves per level, 10 levels


def test_blame_falls_back_to_the_whole_group_for_a_combination():
    def problem_of(group):
        return "pair" if {1, 6} <= set(group) else None

    assert set(fix_edits.blame(list(range(8)), problem_of, "pair")) == set(range(8))
