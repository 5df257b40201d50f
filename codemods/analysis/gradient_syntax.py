"""Statement and name helpers of the training-step model: read-only walks over LibCST nodes, the
scopes of a module with each statement's branch, and what a statement assigns."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from mpfix.codemods._walk import children, walk
from mpfix.codemods.analysis.gradient_records import (
    _LSO_NAMES, _NOT_OPTIMIZERS, _V1_LSO_NAMES, Scope, Statement, _is_v1_optimizer,
)
from mpfix.codemods.names import dotted_name


# --------------------------------------------------------------------------- helpers
# Read-only walks over the dataclass fields (codemods._walk): LibCST's visitor machinery
# rebuilds each node it passes, and this analysis runs on every file that mentions a tape.


def names_in(node: cst.CSTNode | None) -> set[str]:
    """Names read in an expression (attribute fields excluded: ``a.b`` reads ``a``)."""
    found: set[str] = set()
    if node is None:
        return found
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            found.add(current.value)
        elif isinstance(current, cst.Attribute):
            stack.append(current.value)
        else:
            stack.extend(children(current))
    return found


def calls_in(node: cst.CSTNode) -> list[tuple[cst.Call, bool]]:
    """Calls in source order, each with whether it sits inside ``x if c else y`` (not in nested defs)."""
    found: list[tuple[cst.Call, bool]] = []
    stack: list[tuple[cst.CSTNode, bool]] = [(node, False)]
    while stack:
        current, ifexp = stack.pop()
        kind = type(current)  # final node classes: cheaper than isinstance on every node
        if (kind is cst.FunctionDef or kind is cst.ClassDef) and current is not node:
            continue
        if kind is cst.Call:
            found.append((current, ifexp))
        inner = ifexp or kind is cst.IfExp
        kids = children(current)
        kids.reverse()
        stack.extend([(child, inner) for child in kids])
    return found


def contains(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    return any(node is inner for node in walk(outer))


def assigned_targets(stmt: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.BaseExpression | None]]:
    """(target, value) of every assignment in a simple statement line."""
    out: list[tuple[cst.BaseExpression, cst.BaseExpression | None]] = []
    if not isinstance(stmt, cst.SimpleStatementLine):
        return out
    for small in stmt.body:
        if isinstance(small, cst.Assign):
            for t in small.targets:
                out.append((t.target, small.value))
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            out.append((small.target, small.value))
    return out


def target_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        found: set[str] = set()
        for el in target.elements:
            found |= target_names(el.value)
        return found
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return set()


def assigns_name(stmt: cst.CSTNode, name: str) -> bool:
    """True if ``stmt`` (or a statement nested in it) assigns ``name``."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return any(name in target_names(t) for t, _ in assigned_targets(stmt))
    for child in _child_statements(stmt):
        if assigns_name(child, name):
            return True
    if isinstance(stmt, cst.For) and name in target_names(stmt.target):
        return True
    return False


def _child_statements(stmt: cst.CSTNode) -> Iterator[cst.BaseStatement]:
    body = getattr(stmt, "body", None)
    if isinstance(body, cst.IndentedBlock):
        yield from body.body
    for attr in ("orelse", "finalbody"):
        other = getattr(stmt, attr, None)
        if other is not None:
            if isinstance(other, cst.If):  # elif
                yield other
            else:
                yield from _child_statements(other)
    for handler in getattr(stmt, "handlers", ()) or ():
        yield from _child_statements(handler)
    if isinstance(stmt, (cst.Else, cst.Finally, cst.ExceptHandler)) and isinstance(stmt.body, cst.IndentedBlock):
        pass  # handled through the owner's attributes above


def _params(node: cst.FunctionDef) -> list[str]:
    p = node.params
    return [param.name.value for param in (*p.posonly_params, *p.params, *p.kwonly_params)]


def _is_optimizer_constructor(qualified: str | None) -> bool:
    if qualified is None:
        return False
    if qualified in _LSO_NAMES or qualified in _V1_LSO_NAMES or _is_v1_optimizer(qualified):
        return True
    parts = qualified.split(".")
    if len(parts) < 3 or parts[0] != "keras" or parts[1] != "optimizers":
        return False
    last = parts[-1]
    if any(p in ("schedules",) for p in parts):
        return False
    return last == "get" or (last[:1].isupper() and last not in _NOT_OPTIMIZERS)


def _keyword(call: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


# --------------------------------------------------------------------------- scopes
def _walk(body, parents: tuple, conditional: bool, scope: Scope, scopes: list[Scope], class_name: str | None,
          branch: tuple = ()) -> None:
    for stmt in body:
        if isinstance(stmt, cst.FunctionDef):
            inner = Scope(stmt, stmt.name.value, class_name, _params(stmt))
            scopes.append(inner)
            if isinstance(stmt.body, cst.IndentedBlock):
                _walk(stmt.body.body, (), False, inner, scopes, None)
            continue
        if isinstance(stmt, cst.ClassDef):
            if isinstance(stmt.body, cst.IndentedBlock):
                for member in stmt.body.body:
                    if isinstance(member, cst.FunctionDef):
                        inner = Scope(member, member.name.value, stmt.name.value, _params(member))
                        scopes.append(inner)
                        if isinstance(member.body, cst.IndentedBlock):
                            _walk(member.body.body, (), False, inner, scopes, stmt.name.value)
            continue
        scope.statements.append(Statement(stmt, parents, conditional, branch))
        if isinstance(stmt, cst.SimpleStatementLine):
            continue
        inner_parents = parents + (stmt,)
        branchy = isinstance(stmt, (cst.If, cst.Try, cst.While)) or conditional
        forks = isinstance(stmt, (cst.If, cst.Try))
        first = branch + ((id(stmt), 0),) if forks else branch
        body_node = getattr(stmt, "body", None)
        if isinstance(body_node, cst.IndentedBlock):
            _walk(body_node.body, inner_parents, branchy, scope, scopes, class_name, first)
        elif isinstance(body_node, cst.SimpleStatementSuite):
            scope.statements.append(Statement(cst.SimpleStatementLine(body=body_node.body), inner_parents, branchy, first))
        orelse = getattr(stmt, "orelse", None)
        # An if's else is the other branch; a try's or loop's else runs after its body.
        other = branch + ((id(stmt), 1),) if isinstance(stmt, cst.If) else first
        if isinstance(orelse, cst.If):
            _walk([orelse], inner_parents, True, scope, scopes, class_name, other)
        elif orelse is not None and isinstance(orelse.body, cst.IndentedBlock):
            _walk(orelse.body.body, inner_parents, True, scope, scopes, class_name, other)
        for index, handler in enumerate(getattr(stmt, "handlers", ()) or ()):
            if isinstance(handler.body, cst.IndentedBlock):
                _walk(handler.body.body, inner_parents + (handler,), True, scope, scopes, class_name,
                      branch + ((id(stmt), 2 + index),))
        final = getattr(stmt, "finalbody", None)
        if final is not None and isinstance(final.body, cst.IndentedBlock):
            _walk(final.body.body, inner_parents, branchy, scope, scopes, class_name, branch)


def _is_tape(resolve, func: cst.BaseExpression) -> bool:
    """``tf.GradientTape`` as imported; unresolved ``x.GradientTape`` too (snippets, notebooks without
    the import cell): the name is TensorFlow's alone."""
    qualified = resolve(func)
    if qualified is not None:
        return qualified == "tensorflow.GradientTape"
    dotted = dotted_name(func)
    return dotted is not None and dotted.rpartition(".")[2] == "GradientTape"


def _optimizer_classes(module: cst.Module) -> set[str]:
    """Names of the module's classes that are optimizers (named so, or deriving from one)."""
    found: set[str] = set()
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef):
            bases = [dotted_name(b.value) or "" for b in stmt.bases]
            if "Optimizer" in stmt.name.value or any("Optimizer" in b or b in found for b in bases):
                found.add(stmt.name.value)
    return found


def exclusive(a: Statement, b: Statement) -> bool:
    """True if ``a`` and ``b`` sit on different branches of one ``if`` (or a try body and a handler)."""
    mine = dict(a.branch)
    return any(key in mine and mine[key] != which for key, which in b.branch)


def _scopes(module: cst.Module) -> list[Scope]:
    top = Scope(module, "<module>", None, [])
    scopes = [top]
    _walk(module.body, (), False, top, scopes, None)
    return scopes


def _header_calls(stmt: cst.BaseStatement) -> list[tuple[cst.Call, bool]]:
    """Calls in a compound statement's header (with items, for iterables), not its body."""
    if isinstance(stmt, cst.With):
        found = []
        for item in stmt.items:
            found.extend(calls_in(item.item))
        return found
    if isinstance(stmt, cst.For):
        return calls_in(stmt.iter)
    if isinstance(stmt, (cst.If, cst.While)):
        return calls_in(stmt.test)
    return []



def taped_calls(module: cst.Module, resolve, index: dict | None = None) -> tuple[list[cst.Call], dict]:
    """The calls inside a ``with tf.GradientTape()`` block anywhere in the module (a ``main()`` loop or
    module-level code included: the tape records what they compute, so the block is a training step), and
    the parent of each node under those blocks."""
    withs = index.get(cst.With, []) if index is not None else [n for n in walk(module) if isinstance(n, cst.With)]
    calls: list[cst.Call] = []
    parents: dict[cst.CSTNode, cst.CSTNode] = {}
    for node in withs:
        if not any(isinstance(item.item, cst.Call) and _is_tape(resolve, item.item.func) for item in node.items):
            continue
        stack: list[cst.CSTNode] = [node.body]
        while stack:
            current = stack.pop()
            if isinstance(current, cst.Call):
                calls.append(current)
            for child in children(current):
                parents[child] = current
                stack.append(child)
    return calls, parents


def taped_functions(module: cst.Module, resolve, index: dict | None = None) -> frozenset[str]:
    """Names of the functions called by name inside a ``with tf.GradientTape()`` block (``taped_calls``): each
    is a loss or a forward pass whatever its name (``nt_xent(z1, z2)``: held-out scripts, wave 4)."""
    return frozenset(c.func.value for c in taped_calls(module, resolve, index)[0] if isinstance(c.func, cst.Name))


def returned_tapes(module: cst.Module, resolve, index: dict | None = None) -> dict[str, int | None]:
    """Functions that return a tape their own ``with tf.GradientTape() as t`` block recorded on, by name: the
    position of the tape in the returned tuple (None: returned alone). The caller's tape no longer records."""
    found: dict[str, int | None] = {}
    if index is not None:
        functions, withs = index.get(cst.FunctionDef, []), index.get(cst.With, [])
    else:
        functions, withs = [], []
        for n in walk(module):
            if isinstance(n, cst.FunctionDef):
                functions.append(n)
            elif isinstance(n, cst.With):
                withs.append(n)
    # No `with` in the module binds a tape (the test below, on every With): each function's names are empty.
    if not any(item.asname is not None and isinstance(item.asname.name, cst.Name) and isinstance(item.item, cst.Call)
               and _is_tape(resolve, item.item.func) for node in withs for item in node.items):
        return found
    for func in functions:
        names = {item.asname.name.value for node in walk(func) if isinstance(node, cst.With) for item in node.items
                 if item.asname is not None and isinstance(item.asname.name, cst.Name)
                 and isinstance(item.item, cst.Call) and _is_tape(resolve, item.item.func)}
        if not names:
            continue
        for node in walk(func):
            value = node.value if isinstance(node, cst.Return) else None
            if isinstance(value, cst.Name) and value.value in names:
                found[func.name.value] = None
            elif isinstance(value, cst.Tuple):
                for position, element in enumerate(value.elements):
                    if isinstance(element.value, cst.Name) and element.value.value in names:
                        found[func.name.value] = position
    return found


def tape_from_call(target: cst.BaseExpression, value: cst.BaseExpression | None, tapes_returned: dict) -> str | None:
    """The name ``target`` binds to a returned tape (``tape, loss = self.forward(x)``), if ``value`` calls such a
    function (by name, or a ``self.`` method) and the target takes the tape's position."""
    if not isinstance(value, cst.Call):
        return None
    func = value.func
    name = func.value if isinstance(func, cst.Name) else func.attr.value if (
        isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self") else None
    if name is None or name not in tapes_returned:
        return None
    position = tapes_returned[name]
    if position is None:
        return target.value if isinstance(target, cst.Name) else None
    if isinstance(target, (cst.Tuple, cst.List)) and position < len(target.elements):
        element = target.elements[position].value
        return element.value if isinstance(element, cst.Name) else None
    return None
