"""The fast walker visits exactly what LibCST's ``node.visit`` visits, in the same order."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import libcst as cst
import pytest

from mpfix.codemods._walk import TRIVIA, Visitor, children, find_all, is_trivia_type, walk

# Constructs whose fields LibCST declares in an order other than source order
# (decorators after body, keyword after value, lpar after everything...), and rarer syntax.
SNIPPET = '''\
import os, sys as system
from . import (a as b, c)
from ..pkg import *


@decorator(arg=1)
@other.attr
async def f(a, /, b: int = 2, *args, c, d=3, **kw) -> "T":
    """Doc."""
    global g
    x: int = (yield a)
    y = [i for i in range(3) if i if not i]
    z = {k: v for k, v in kw.items()}, {*args}, {**kw}, (*args,)
    w = lambda q, *r, s=1: q if r else s
    async with open(x) as fh, other() as (p, q):
        await fh
    async for item in aiter():
        pass
    else:
        pass
    try:
        raise ValueError("x") from None
    except (TypeError, KeyError) as err:
        assert err, f"{err!r:>{width}} {x=}"
    else:
        del y[1:2:3], z[::2]
    finally:
        return f"a" "b" 'c'
    while (n := len(x)) > 1:
        x @= x ** -2 // 3 % 4 << 1 >> 2 & 3 | 4 ^ 5
        continue
    match command:
        case [Point(x=0, y=yy), *rest] if yy > 0:
            pass
        case {"k": 1, **others} | str() as s:
            pass


class C(Base, metaclass=Meta):
    attr: list[int] = []

    def m(self):
        return not -self.attr[0] and self.attr is not None or ~1 in ()
'''


def _libcst_order(module: cst.Module) -> list[cst.CSTNode]:
    seen: list[cst.CSTNode] = []

    class Recorder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            seen.append(node)
            return True

    module.visit(Recorder())
    return seen


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _corpus() -> list[Path]:
    """Real code: the installed keras sources (no import: TensorFlow stays out), and mpfix's own."""
    files: list[Path] = []
    spec = importlib.util.find_spec("keras")
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
        files += sorted(root.rglob("*.py"), key=lambda p: -p.stat().st_size)[:6]
    here = Path(__file__).resolve().parents[1]
    files += sorted((here / "codemods").glob("*.py")) + sorted((here / "mpfix").glob("*.py"))
    return files


def _modules():
    yield "snippet", cst.parse_module(SNIPPET)
    for path in _corpus():
        try:
            yield str(path), cst.parse_module(path.read_text(encoding="utf-8"))
        except (cst.ParserSyntaxError, UnicodeDecodeError):
            continue


@pytest.mark.slow  # a corpus-equivalence check (~20 s on two cores): `pytest -m "not slow"` skips it
def test_full_walk_is_libcst_visit_order_on_real_code():
    count = 0
    types: set[type] = set()
    for name, module in _modules():
        expected = _libcst_order(module)
        assert _same(list(walk(module, trivia=True)), expected), name
        # Without trivia: the same sequence with whitespace, brackets and tokens left out.
        assert _same(list(walk(module)), [n for n in expected if not is_trivia_type(type(n))]), name
        count += len(expected)
        types.update(type(n) for n in expected)
    assert count > 500_000  # a large real sample, not just the snippet
    # The snippet's rare syntax was part of it.
    assert {cst.Match, cst.MatchClass, cst.Decorator, cst.ParamSlash, cst.FormattedStringExpression} <= types


def test_children_match_libcst_children():
    module = cst.parse_module(SNIPPET)
    for node in walk(module, trivia=True):
        assert _same(children(node, trivia=True), list(node.children)), type(node).__name__
        assert _same(children(node), [c for c in node.children if not is_trivia_type(type(c))])


def test_source_order_where_declaration_order_differs():
    func = cst.parse_statement("@dec\ndef f(a=b, *, c=d):\n    return e\n")
    names = [n.value for n in find_all(func, cst.Name)]
    # FunctionDef declares decorators after body; Param declares default after name.
    assert names == ["dec", "f", "a", "b", "c", "d", "e"]


def test_find_all_with_trivia_types_walks_trivia():
    module = cst.parse_module("f(a, b)\n")
    assert len(list(find_all(module, cst.Comma))) == 1
    assert len(list(find_all(module, cst.CSTNode))) == len(_libcst_order(module))
    assert [n.value for n in find_all(module, cst.Name, lambda n: n.value != "f")] == ["a", "b"]
    assert cst.Comma in TRIVIA


def test_visitor_dispatch_skip_leave_and_reentry():
    module = cst.parse_module("def f(x):\n    g(x)\nclass C:\n    h(1)\nk(y.z)\n")
    events: list[str] = []

    class V(Visitor):
        def visit_FunctionDef(self, node):
            events.append("visit f")

        def leave_FunctionDef(self, node):
            events.append("leave f")

        def visit_ClassDef(self, node):
            events.append("skip C")
            return False

        def leave_ClassDef(self, node):
            events.append("leave C")  # LibCST calls leave even when children were skipped

        def visit_Call(self, node):
            events.append("call " + node.func.value)

        def visit_Attribute(self, node):
            self.walk(node.value)  # re-entrant, like ``node.value.visit(self)``
            return False

        def visit_Name(self, node):
            if node.value in ("y", "z"):
                events.append("name " + node.value)

    V().walk(module)
    assert events == ["visit f", "call g", "leave f", "skip C", "leave C", "call k", "name y"]


def test_visitor_for_a_trivia_type_sees_trivia():
    class Commas(Visitor):
        count = 0

        def visit_Comma(self, node):
            type(self).count += 1

    Commas().walk(cst.parse_module("f(a, b, c)\n"))
    assert Commas.count == 2


@pytest.mark.parametrize("code", ["x = 1\n", "", "if a:\n    pass\nelif b:\n    pass\nelse:\n    pass\n"])
def test_small_modules(code):
    module = cst.parse_module(code)
    assert _same(list(walk(module, trivia=True)), _libcst_order(module))
