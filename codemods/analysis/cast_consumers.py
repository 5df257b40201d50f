"""Which same-file functions and layers cast a parameter to float32 before any other use of it.

``loss = mdn_nll(y, model(x))`` with ``def mdn_nll(y, params): params = tf.cast(params, "float32") ...``, or
``head(tower(images))`` with a layer class whose ``call`` casts that input first: the float16 value a model
returns is never computed on in float16, exactly as for ``tf.cast(model(x), tf.float32)`` at the call (MP205's
cast-first test reads both). Decided from the callee's code only: every read of the parameter before the
statement that rebinds it must be the first argument of a cast to float32. A read anywhere else, a cast in
one branch only, a nested function that reads it, or a parameter never cast: not cast-first.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from mpfix.codemods._float16_scope import argument
from mpfix.codemods._walk import children
from mpfix.codemods.analysis.dtype_lattice import Dtype, spelled_dtype
from mpfix.codemods.facts import ops as op_table

IsCast = Callable[[cst.Call], bool]


def is_float32_cast(context, call: cst.Call) -> bool:
    """``tf.cast(x, tf.float32)`` / ``ops.cast(x, "float32")`` (any op the table marks as a cast)."""
    spec = op_table.lookup(context.resolve(call.func))
    dtype = argument(call, "dtype", 1)
    return spec is not None and spec.is_cast and dtype is not None and \
        spelled_dtype(dtype.value, context.resolve) is Dtype.FLOAT32


def _reads(node: cst.CSTNode, name: str):
    """(read, its parent, its grandparent) for every load of ``name`` under ``node``; a nested
    function, lambda or class that mentions it yields (None, None, None): its reads are not followed."""
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None, cst.CSTNode | None]] = [(node, None, None)]
    while stack:
        current, parent, grandparent = stack.pop()
        if isinstance(current, cst.Name):
            if current.value == name:
                yield current, parent, grandparent
            continue
        if isinstance(current, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            if any(n.value == name for n in _names(current)):
                yield None, None, None
            continue
        if isinstance(current, (cst.AssignTarget, cst.AnnAssign)) and isinstance(current.target, cst.Name):
            kids = [current.annotation, current.value] if isinstance(current, cst.AnnAssign) else []
            kids = [k for k in kids if k is not None]  # the stored name is not a read
        elif isinstance(current, cst.Attribute):
            kids = [current.value]  # `.attr` is not a read of the name
        elif isinstance(current, cst.Arg):
            kids = [current.value]  # nor is a keyword
        else:
            kids = children(current)
        stack.extend((child, current, parent) for child in kids)


def _names(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            yield current
        stack.extend(children(current))


def _rebinds(stmt: cst.BaseStatement, name: str) -> bool:
    """``name = ...`` as the whole statement (straight-line code, not a branch)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else \
        [small.target] if isinstance(small, cst.AnnAssign) and small.value is not None else []
    return bool(targets) and all(isinstance(t, cst.Name) and t.value == name for t in targets)


def casts_first(function: cst.FunctionDef, name: str, is_cast: IsCast) -> bool:
    """Every read of parameter ``name`` before it is rebound is ``cast(name, float32)``, and there is one."""
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else ()
    cast_seen = False
    for stmt in body:
        for read, parent, grandparent in _reads(stmt, name):
            if read is None or not isinstance(parent, cst.Arg) or parent.keyword is not None or \
                    not isinstance(grandparent, cst.Call) or not grandparent.args or \
                    grandparent.args[0] is not parent or not is_cast(grandparent):
                return False
            cast_seen = True
        if _rebinds(stmt, name):
            return cast_seen
    return cast_seen


def _parameter(function: cst.FunctionDef, skip: int, call: cst.Call, arg: cst.Arg) -> str | None:
    """The parameter of ``function`` that ``arg`` of ``call`` binds (None: a star argument or unknown)."""
    p = function.params
    if isinstance(p.star_arg, cst.Param) or p.star_kwarg is not None or arg.star:
        return None  # `*args` / `**kwargs` on either side: which parameter is unknown
    if arg.keyword is not None:
        return arg.keyword.value
    if any(a.star or a.keyword is not None for a in call.args[:call.args.index(arg)]):
        return None
    positional = [*p.posonly_params, *p.params][skip:]
    index = call.args.index(arg)
    return positional[index].name.value if index < len(positional) else None


def _callee(module: cst.Module, assigned: dict[str, list[cst.BaseExpression]], call: cst.Call) \
        -> tuple[cst.FunctionDef, int] | None:
    """The module-level function ``f(...)`` calls, or the ``call`` method of the module-level layer class
    an instance ``layer = Cls(...)`` (bound once) is built from; with how many leading parameters to skip."""
    if not isinstance(call.func, cst.Name):
        return None
    name = call.func.value
    tops = {stmt.name.value: stmt for stmt in module.body if isinstance(stmt, (cst.FunctionDef, cst.ClassDef))}
    found = tops.get(name)
    if isinstance(found, cst.FunctionDef):
        return found, 0
    values = assigned.get(name, [])
    if found is not None or len(values) != 1 or not isinstance(values[0], cst.Call) or \
            not isinstance(values[0].func, cst.Name):
        return None
    cls = tops.get(values[0].func.value)
    if not isinstance(cls, cst.ClassDef) or not isinstance(cls.body, cst.IndentedBlock):
        return None
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "call":
            return stmt, 1
    return None


def consumed_as_float32(context, parents: dict, call: cst.Call,
                        assigned: dict[str, list[cst.BaseExpression]]) -> bool:
    """``call``'s result is an argument of a same-file function or layer that casts it to float32 first."""
    arg = parents.get(call)
    consumer = parents.get(arg) if isinstance(arg, cst.Arg) else None
    if not isinstance(consumer, cst.Call) or arg not in consumer.args:
        return False
    callee = _callee(context.module, assigned, consumer)
    if callee is None:
        return False
    function, skip = callee
    name = _parameter(function, skip, consumer, arg)
    return name is not None and casts_first(function, name, lambda c: is_float32_cast(context, c))
