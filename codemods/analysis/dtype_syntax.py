"""Syntax helpers of the dtype analysis: calls, assignments and imported names of a module or function."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import Visitor, children, walk
from mpfix.codemods.names import dotted_name


def walk_calls(root: cst.CSTNode):
    from mpfix.codemods._walk import find_all

    return find_all(root, cst.Call)


def assignments(func: cst.FunctionDef):
    """Every ``Assign`` in ``func``'s body (nested functions included, nested classes not)."""
    stack = [func.body]
    expression = _EXPRESSION
    while stack:
        node = stack.pop()
        node_type = type(node)
        if node_type is cst.Assign:
            yield node
        if node_type is cst.ClassDef:
            continue
        found = expression.get(node_type)
        if found is None:  # isinstance once per node type (LibCST's classes are ABCs: each test is a Python call)
            found = expression[node_type] = isinstance(node, cst.BaseExpression)
        if found:
            continue  # assignments are statements: do not walk into expressions
        stack.extend(children(node))


_EXPRESSION: dict[type, bool] = {}


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
        if type(node) in _COMPOUND:  # exact types: these classes have no subclasses, and isinstance on ABCs is slow
            if type(node.body) is cst.IndentedBlock:
                found.append(node.body.body)
            for attr in ("orelse", "finalbody"):
                more = getattr(node, attr, None)
                if more is not None:
                    todo.append(more)
            todo.extend(getattr(node, "handlers", ()))
    return found


_COMPOUND = frozenset({cst.If, cst.Try, cst.TryStar, cst.With, cst.For, cst.While, cst.Else, cst.Finally,
                       cst.ExceptHandler, cst.ExceptStarHandler})


def builder_returns(func: cst.FunctionDef, call: cst.BaseExpression) -> tuple[cst.FunctionDef, list] | None:
    """``call`` calls a function nested in ``func`` (tf_keras BN's ``_renorm_variable`` in ``build``): that function
    and what it returns, a returned local name replaced by its one assigned value (``var = self.add_weight(...)``)."""
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name):
        return None
    from mpfix.codemods._walk import find_all

    nested = next((f for f in find_all(func.body, cst.FunctionDef) if f.name.value == call.func.value), None)
    if nested is None:
        return None
    values: dict[str, list] = {}
    returned = []
    for stmt in nested.body.body:
        for small in getattr(stmt, "body", ()) if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                values.setdefault(small.targets[0].target.value, []).append(small.value)
            elif isinstance(small, cst.Return) and small.value is not None:
                returned.append(small.value)
    found = []
    for value in returned:
        if isinstance(value, cst.Name):
            assigned = values.get(value.value, [])
            if len(assigned) != 1:
                return None
            value = assigned[0]
        found.append(value)
    return (nested, found) if found else None


def through_builders(values: list) -> list:
    """``(method, value)`` pairs of ``self.x = value`` with ``self.renorm_mean = _renorm_variable(...)`` replaced by
    what the nested function returns (``var = self.add_weight(...)``), with that function as the method."""
    found = []
    for func, value in values:
        built = builder_returns(func, value) if isinstance(func, cst.FunctionDef) else None
        found.extend([(built[0], v) for v in built[1]] if built else [(func, value)])
    return found


# The nodes whose text is their own (every other node's code is fixed tokens and whitespace around its children's).
_TEXT = frozenset({cst.Name, cst.SimpleString, cst.FormattedStringText, cst.TemplatedStringText, cst.Comment,
                   cst.Integer, cst.Float, cst.Imaginary})


def mentions(node: cst.CSTNode, words: tuple[str, ...]) -> bool:
    """Whether ``module.code_for_node(node)`` can contain one of ``words`` (each letters, digits and ``_``): such a
    word lies within one token (a name, string, number or comment), so this reads those tokens, trivia included,
    without generating the code. False means no; True means look at the code."""
    text = _TEXT
    for child in walk(node, trivia=True):
        if type(child) in text:
            value = child.value
            for word in words:
                if word in value:
                    return True
    return False
