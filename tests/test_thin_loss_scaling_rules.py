"""The loss-scaling rules (MP1xx, and MP303 which translates scaling between generations) are thin
queries: a rule file holds its templates, explanation, examples and a few lines that report what a
``codemods/_*.py`` helper found; the analysis and the fixes live in those helpers.

Before the split, MP303's file held 167 lines of functions and methods (three module-level
helpers, the pairing of scale and unscale calls, the fixes of both directions; 518 lines in all),
MP101's 79 (502 in all); now 14 and 21 (339 and 437: MP101's nine INVALID examples are ~270 lines).
The examples and templates stay in the class (docs/architecture.md).
"""

from __future__ import annotations

import ast
import inspect

import pytest

from mpfix.codemods import all_rules

MAX_LOGIC_LINES = 80
RULES = [rule for rule in all_rules() if rule.code.startswith("MP1") or rule.code == "MP303"]


def _logic(tree: ast.Module) -> tuple[int, list[str]]:
    """Lines of functions and methods in the file, and its module-level functions."""
    lines, functions = 0, []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines += node.end_lineno - node.lineno + 1
            functions.append(node.name)
        elif isinstance(node, ast.ClassDef):
            lines += sum(item.end_lineno - item.lineno + 1 for item in node.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return lines, functions


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_a_loss_scaling_rule_file_is_a_thin_query(rule):
    path = inspect.getsourcefile(rule)
    with open(path, encoding="utf-8") as handle:
        lines, functions = _logic(ast.parse(handle.read()))
    assert not functions, f"{path}: module-level helpers {functions} belong in a codemods/_*.py module"
    assert lines <= MAX_LOGIC_LINES, f"{path}: {lines} lines of functions and methods"


def test_the_family_is_there():
    assert {"MP101", "MP102", "MP303"} <= {rule.code for rule in RULES}
