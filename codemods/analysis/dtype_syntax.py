"""Syntax helpers of the dtype analysis: calls, assignments and imported names of a module or function."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import Visitor, children
from mpfix.codemods.names import dotted_name


def walk_calls(root: cst.CSTNode):
    from mpfix.codemods._walk import find_all

    return find_all(root, cst.Call)


def assignments(func: cst.FunctionDef):
    """Every ``Assign`` in ``func``'s body (nested functions included, nested classes not)."""
    stack = [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Assign):
            yield node
        if isinstance(node, cst.ClassDef):
            continue
        if isinstance(node, (cst.BaseExpression,)):
            continue  # assignments are statements: do not walk into expressions
        stack.extend(children(node))


def imported_names(module: cst.Module) -> set[str]:
    """Local names bound by module-level imports (inside ``if``/``try`` too), relative ones included."""
    names: set[str] = set()

    def walk(body) -> None:
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Import):
                        for alias in small.names:
                            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                                names.add(alias.asname.name.value)
                            else:
                                names.add((dotted_name(alias.name) or "").split(".")[0])
                    elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                        for alias in small.names:
                            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                                names.add(alias.asname.name.value)
                            else:
                                names.add(dotted_name(alias.name) or "")
            elif isinstance(stmt, (cst.If, cst.Try)):
                walk(stmt.body.body)
                for extra in [getattr(stmt, "orelse", None), *getattr(stmt, "handlers", ())]:
                    if extra is not None and isinstance(getattr(extra, "body", None), cst.IndentedBlock):
                        walk(extra.body.body)

    walk(module.body)
    names.discard("")
    return names


class Calls(Visitor):
    def __init__(self, into_classes: bool = False) -> None:
        super().__init__()
        self.calls: list[cst.Call] = []
        self.into_classes = into_classes

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return self.into_classes


def blocks(stmt: cst.CSTNode) -> list:
    """The statement lists of a compound statement (if/elif/else, try/except/finally, with, for, while)."""
    found = []
    todo = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, (cst.If, cst.Try, cst.TryStar, cst.With, cst.For, cst.While, cst.Else, cst.Finally,
                             cst.ExceptHandler, cst.ExceptStarHandler)):
            if isinstance(node.body, cst.IndentedBlock):
                found.append(node.body.body)
            for attr in ("orelse", "finalbody"):
                more = getattr(node, attr, None)
                if more is not None:
                    todo.append(more)
            todo.extend(getattr(node, "handlers", ()))
    return found
