"""Structural parameter typing: a parameter whose attributes only the project's Keras model class defines is one.

research DELF (issue 18, C33: N15, N16): ``extract_global_descriptors_from_list(net, images, ...)`` reads
``net.meta['outputdim']`` and calls ``net(image)``; nobody in the file passes ``net``, but ``meta`` is an attribute
only ``GlobalFeatureNet(tf.keras.Model)`` assigns (``self.meta = {...}`` in ``__init__``). The fact:

    a parameter of a module function on which the function reads attributes, where every attribute the project
    defines among them is defined by a project Keras layer/model class and by no other project class, and one
    such Keras class defines them all, is an instance of that class: calling it returns the compute dtype.

Only names the project defines count as evidence: ``self.x = ...`` in a class's methods, its methods, its class
attributes (its project bases' too). An attribute every Keras layer has (``net.trainable_variables``,
``net.compute_dtype``, ``net.layers``) names no class: ``tf.Module`` and optimizers have some of them too, and a
Keras model from outside the project may have a float32 head; such reads are neutral, never evidence. A Keras
class whose text spells ``float32`` (a float32 head, a cast of its output) may return float32: no fact (the
cross-file scan's rule, ``mpfix.project.crosscalls``). A parameter the function rebinds is not typed.

This module decides it within one file (the class is in the file), with the project-wide module's rule
(``mpfix.project.structural_types.typed_parameters``, which ``mpfix.project.structural`` applies across the project); both feed
``Region.layer_params``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import libcst as cst

from mpfix.codemods._walk import children, walk
from mpfix.project.structural_types import KERAS_CLASS_BASES, ClassShape, class_index, typed_parameters

# -- one file (LibCST) ------------------------------------------------------------------------------------
def _self_targets(node: cst.BaseExpression, found: set[str]) -> None:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        found.add(node.attr.value)
    elif isinstance(node, (cst.Tuple, cst.List)):
        for element in node.elements:
            _self_targets(element.value, found)


def _own_names(cls: cst.ClassDef) -> set[str]:
    found: set[str] = set()
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef):
            found.add(stmt.name.value)
            for node in walk(stmt):
                if isinstance(node, cst.Assign):
                    for target in node.targets:
                        _self_targets(target.target, found)
                elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
                    _self_targets(node.target, found)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    found.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))
                elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    found.add(small.target.value)
    return found


def _spells_float32(cls: cst.ClassDef) -> bool:
    """The class spells float32, or reads its variable dtype (``self.dtype``: float32 under a mixed policy)."""
    for node in walk(cls):
        if isinstance(node, cst.Attribute) and (node.attr.value == "float32" or node.attr.value in (
                "dtype", "variable_dtype") and isinstance(node.value, cst.Name) and node.value.value == "self"):
            return True
        if isinstance(node, cst.SimpleString) and node.value.strip("'\"") == "float32":
            return True
    return False


def class_shapes(classes: Mapping[str, cst.ClassDef], resolve: Callable[[cst.CSTNode], str | None],
                 ) -> list[ClassShape]:
    """The shapes of a file's classes (bases of the same file followed, resolved through its imports)."""
    keras_memo: dict[str, bool] = {}
    names_memo: dict[str, frozenset[str]] = {}

    def local_base(base: cst.BaseExpression, name: str) -> str | None:
        return base.value if isinstance(base, cst.Name) and base.value in classes and base.value != name else None

    def keras(name: str, depth: int = 0) -> bool:
        if name not in keras_memo:
            keras_memo[name] = False  # cycles
            result = False
            for base in classes[name].bases:
                resolved = resolve(base.value) or ""
                parent = local_base(base.value, name)
                if resolved.startswith(KERAS_CLASS_BASES) or (parent is not None and depth < 8 and keras(parent, depth + 1)):
                    result = True
                    break
            keras_memo[name] = result
        return keras_memo[name]

    def names(name: str, depth: int = 0) -> frozenset[str]:
        if name not in names_memo:
            names_memo[name] = frozenset()  # cycles
            found = _own_names(classes[name])
            for base in classes[name].bases:
                parent = local_base(base.value, name)
                if parent is not None and depth < 8:
                    found |= names(parent, depth + 1)
            names_memo[name] = frozenset(found)
        return names_memo[name]

    shapes = []
    for name, cls in classes.items():
        is_keras = keras(name)
        shapes.append(ClassShape(name, names(name), is_keras, is_keras and not _spells_float32(cls)))
    return shapes


def _parameters(func: cst.FunctionDef) -> list[str]:
    params = func.params
    return [p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]
            if p.name.value not in ("self", "cls")]


def _bound(node: cst.BaseExpression, found: set[str]) -> None:
    if isinstance(node, cst.Name):
        found.add(node.value)
    elif isinstance(node, (cst.Tuple, cst.List)):
        for element in node.elements:
            _bound(element.value, found)
    elif isinstance(node, cst.StarredElement):
        _bound(node.value, found)


def parameter_reads(func: cst.FunctionDef) -> dict[str, frozenset[str]]:
    """Parameter -> the attribute names the function reads on it (``p.attr``), for parameters it calls (only a
    call's result can be the compute dtype) and never rebinds (nested functions, lambdas and classes are left out:
    their names may be their own)."""
    params = set(_parameters(func))
    if not params:
        return {}
    reads: dict[str, set[str]] = {}
    rebound: set[str] = set()
    called: set[str] = set()
    stack: list[cst.CSTNode] = [func.body]
    while stack:
        node = stack.pop()
        node_type = type(node)
        if node_type is cst.FunctionDef or node_type is cst.ClassDef or node_type is cst.Lambda:
            continue
        if node_type is cst.Call and isinstance(node.func, cst.Name):
            called.add(node.func.value)
        if node_type is cst.Attribute and isinstance(node.value, cst.Name) and node.value.value in params:
            reads.setdefault(node.value.value, set()).add(node.attr.value)
        elif node_type is cst.Assign:
            for target in node.targets:
                _bound(target.target, rebound)
        elif node_type is cst.AnnAssign or node_type is cst.AugAssign or node_type is cst.For:
            _bound(node.target, rebound)
        elif node_type is cst.AsName:
            _bound(node.name, rebound)
        elif node_type is cst.NamedExpr:
            _bound(node.target, rebound)
        elif node_type is cst.Global or node_type is cst.Nonlocal or node_type is cst.Del:
            rebound.update(params)  # rare: give up on the function
        stack.extend(children(node, trivia=True))  # node.children, without LibCST rebuilding the list
    return {p: frozenset(names) for p, names in reads.items() if p in called and p not in rebound}


def structural_layer_params(functions: Mapping[str, cst.FunctionDef], classes: Mapping[str, cst.ClassDef],
                            resolve: Callable[[cst.CSTNode], str | None],
                            calls: Iterable[cst.Call] | None = None) -> dict[cst.FunctionDef, frozenset[str]]:
    """The module functions' parameters this file's classes type as float16 Keras instances (``calls``: the
    module's calls, when known: a function none of whose parameters is called by name anywhere is not walked)."""
    if not classes or not functions:
        return {}
    called = None if calls is None else {c.func.value for c in calls if type(c.func) is cst.Name}
    reads = {func: found for func in functions.values()
             if (called is None or not called.isdisjoint(_parameters(func))) and (found := parameter_reads(func))}
    if not reads:
        return {}  # no function calls a parameter it reads attributes on: the classes need no look
    index = class_index(class_shapes(classes, resolve))
    found = {}
    for func, params in reads.items():
        typed = typed_parameters(params, index)
        if typed:
            found[func] = typed
    return found
