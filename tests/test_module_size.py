"""No module of mpfix or of its rules over ~400 lines of code (the design card's size bound).

Lines of code are lines holding a token other than a comment, leaving out docstrings and a rule
class's ``VALID``/``INVALID`` lists: a rule's examples are its tests (``test_rule_examples.py``
runs them), data beside the query, not logic. The generated trigger table is data too.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 400
GENERATED = {"_trigger_data.py"}
_SKIP_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                tokenize.ENDMARKER}


def _not_code(tree: ast.Module) -> set[int]:
    """Lines of docstrings and of rule examples."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                targets = statement.targets if isinstance(statement, ast.Assign) else \
                    [statement.target] if isinstance(statement, ast.AnnAssign) else []
                if any(isinstance(t, ast.Name) and t.id in ("VALID", "INVALID") for t in targets):
                    lines.update(range(statement.lineno, statement.end_lineno + 1))
    return lines


def code_lines(source: str) -> int:
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _SKIP_TOKENS:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - _not_code(ast.parse(source)))


def _modules() -> list[Path]:
    found = [*(ROOT / "mpfix").rglob("*.py"), *(ROOT / "codemods").rglob("*.py")]
    return sorted(p for p in found if "__pycache__" not in p.parts and p.name not in GENERATED)


def test_counting_leaves_out_docstrings_comments_and_examples():
    source = '"""Doc\n\nmore."""\n# comment\n\nx = 1\n\n\nclass R:\n    """Rule."""\n    VALID = [\n        "a",\n    ]\n' \
             '    code = "MP0"\n\n    def f(self):\n        """Doc."""\n        return (1 +\n                2)\n'
    assert code_lines(source) == 6  # x = 1; class R:; code = ...; def f; the two lines of the return


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_at_most_400_lines_of_code(path: Path):
    assert code_lines(path.read_text(encoding="utf-8")) <= LIMIT
