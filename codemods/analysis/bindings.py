"""One binding model per scope: every name a scope binds, with its value, statement, branch and kind.

Ruff's SemanticModel in miniature (``Binding`` records target, value, statement, branch and kind),
built over the scopes of ``gradient_syntax`` (each statement with the if/try branch it sits on):

* names: assignments, augmented and annotated assignments, ``for`` and ``with ... as`` targets,
  tuple/list unpacking (each element gets the index it takes), comprehension targets;
* attributes: ``self.x = ...`` in a method binds ``self.x`` in the class, and a parameter's
  default is the value of the attribute it is stored in (``def __init__(self, opt=None):
  self.opt = opt``);
* closures, ``global`` and ``nonlocal``: a name a function reads but does not bind resolves in
  the enclosing functions, then the module; ``global``/``nonlocal`` send its bindings there.

Queries: ``bindings_of(scope, name)`` (source order), ``attribute(class_name, "self.x")``.
``decompose(target, value, ...)`` is the one target decomposition: the dtype regions' assignment
tables (``dtype_regions._Collector``) are filled from the ``Binding`` records it makes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import libcst as cst

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.gradient_records import Scope, _encloses
from mpfix.codemods.names import dotted_name


class BindingKind(enum.Enum):
    ASSIGN = "assign"
    AUGMENTED = "augmented"  # x += v: the old value goes on
    ANNOTATED = "annotated"
    UNPACK = "unpack"  # a, b = v: `element` says which
    FOR = "for"  # for x in v: an element of v
    WITH = "with"  # with v as x
    COMPREHENSION = "comprehension"  # [... for x in v]: an element of v, inside the expression only
    PARAMETER = "parameter"  # value: the default, if any
    ATTRIBUTE_DEFAULT = "attribute-default"  # self.x = param: the parameter's default


@dataclass(frozen=True)
class Binding:
    name: str  # "x" or "self.x"
    value: cst.BaseExpression | None = field(repr=False)
    statement: cst.CSTNode | None = field(repr=False)
    branch: tuple[tuple[int, int], ...]
    kind: BindingKind
    element: int | None = None  # UNPACK: the index taken from the value
    # The statement's whole right-hand side, and where the target sits in the (nested) tuple targets,
    # outermost first (``a, (b, *c) = v``: a (0,), b (1, 0), c (1, 1) starred): what the dtype regions'
    # tables (``dtype_regions._Collector``) read.
    source: cst.BaseExpression | None = field(default=None, repr=False, compare=False)
    path: tuple[int, ...] = ()
    starred: bool = False


@dataclass
class ScopeBindings:
    scope: Scope = field(repr=False)
    names: dict[str, list[Binding]] = field(default_factory=dict)
    declared_global: set[str] = field(default_factory=set)
    declared_nonlocal: set[str] = field(default_factory=set)

    def add(self, binding: Binding) -> None:
        self.names.setdefault(binding.name, []).append(binding)


class Bindings:
    """The binding model of one module (its scopes from ``gradient_syntax._scopes``)."""

    def __init__(self, scopes: list[Scope]) -> None:
        self.scopes = scopes
        self._of: dict[int, ScopeBindings] = {}
        self._attributes: dict[tuple[str | None, str], list[Binding]] = {}
        for scope in scopes:
            self._of[id(scope.node)] = self._build(scope)
        module = self._of[id(scopes[0].node)]
        for scope in scopes[1:]:  # `global x` binds the module's x; `nonlocal x` the enclosing function's
            own = self._of[id(scope.node)]
            for name in own.declared_global:
                for binding in own.names.pop(name, []):
                    module.add(binding)
            for name in own.declared_nonlocal:
                outer = next((self._of[id(s.node)] for s in reversed(scopes[1:])
                              if _encloses(s.node, scope.node) and name in self._of[id(s.node)].names), None)
                for binding in own.names.pop(name, []) if outer is not None else ():
                    outer.add(binding)

    # -- queries -----------------------------------------------------------------------
    def of(self, scope: Scope) -> ScopeBindings:
        return self._of[id(scope.node)]

    def bindings_of(self, scope: Scope, name: str) -> list[Binding]:
        """What ``name`` read in ``scope`` can be bound to: the scope's own bindings, else (a closure or
        a global) those of the innermost enclosing function that binds it, else the module's."""
        own = self.of(scope)
        head = name.partition(".")[0]
        if head == "self" and "." in name:
            return self.attribute(scope.class_name, name)
        if head in own.declared_global:
            return self.of(self.scopes[0]).names.get(name, [])
        if head in own.names and head not in own.declared_nonlocal:
            return own.names.get(name, [])
        for outer in reversed([s for s in self.scopes[1:] if _encloses(s.node, scope.node)]):
            found = self.of(outer).names.get(name)
            if found:
                return found
        return self.of(self.scopes[0]).names.get(name, [])

    def attribute(self, class_name: str | None, name: str) -> list[Binding]:
        """Bindings of ``self.x`` in any method of ``class_name``."""
        return self._attributes.get((class_name, name), [])

    # -- building ----------------------------------------------------------------------
    def _build(self, scope: Scope) -> ScopeBindings:
        found = ScopeBindings(scope)
        defaults: dict[str, cst.BaseExpression | None] = {}
        if isinstance(scope.node, cst.FunctionDef):
            p = scope.node.params
            for param in (*p.posonly_params, *p.params, *p.kwonly_params):
                defaults[param.name.value] = param.default
                found.add(Binding(param.name.value, param.default, None, (), BindingKind.PARAMETER))
        for st in scope.statements:
            node = st.node
            if isinstance(node, cst.For):
                self._target(found, node.target, node.iter, node, st.branch, BindingKind.FOR)
            elif isinstance(node, cst.With):
                for item in node.items:
                    if item.asname is not None:
                        self._target(found, item.asname.name, item.item, node, st.branch, BindingKind.WITH)
            elif isinstance(node, cst.SimpleStatementLine):
                for small in node.body:
                    if isinstance(small, cst.Assign):
                        for target in small.targets:
                            self._target(found, target.target, small.value, node, st.branch, BindingKind.ASSIGN)
                    elif isinstance(small, cst.AugAssign):
                        self._target(found, small.target, small.value, node, st.branch, BindingKind.AUGMENTED)
                    elif isinstance(small, cst.AnnAssign) and small.value is not None:
                        self._target(found, small.target, small.value, node, st.branch, BindingKind.ANNOTATED)
                    elif isinstance(small, cst.Global):
                        found.declared_global.update(n.name.value for n in small.names)
                    elif isinstance(small, cst.Nonlocal):
                        found.declared_nonlocal.update(n.name.value for n in small.names)
            for comp in (n for part in _own_parts(node) for n in walk(part) if type(n) in _COMPREHENSIONS):
                for_in = comp.for_in
                while for_in is not None:
                    self._target(found, for_in.target, for_in.iter, comp, st.branch, BindingKind.COMPREHENSION)
                    for_in = for_in.inner_for_in
        for bindings in list(found.names.values()):
            for binding in bindings:
                if binding.name.startswith("self.") and scope.class_name is not None:
                    self._attributes.setdefault((scope.class_name, binding.name), []).append(binding)
                    value = binding.value
                    if isinstance(value, cst.Name) and defaults.get(value.value) is not None:
                        self._attributes[(scope.class_name, binding.name)].append(Binding(
                            binding.name, defaults[value.value], binding.statement, binding.branch,
                            BindingKind.ATTRIBUTE_DEFAULT))
        return found

    @staticmethod
    def _target(found: ScopeBindings, target: cst.BaseExpression, value: cst.BaseExpression | None,
                statement: cst.CSTNode, branch: tuple, kind: BindingKind) -> None:
        for binding in decompose(target, value, statement, branch, kind):
            found.add(binding)


def decompose(target: cst.BaseExpression, value: cst.BaseExpression | None, statement: cst.CSTNode | None,
              branch: tuple, kind: BindingKind) -> list[Binding]:
    """The bindings one target makes, in source order: a name or ``self.x`` binds the value; a tuple/list
    target binds each element to the value's element at its index (``a, b = x, y``: as many elements, none
    starred) or, for any other value, to the index it takes (``element``); a starred element is bound like
    its inner target."""
    found: list[Binding] = []
    _decompose(found, target, value, statement, branch, kind, None, (), False, value)
    return found


def _decompose(found: list[Binding], target: cst.BaseExpression, value: cst.BaseExpression | None,
               statement: cst.CSTNode | None, branch: tuple, kind: BindingKind, element: int | None,
               path: tuple[int, ...], starred: bool, source: cst.BaseExpression | None) -> None:
    # A module function, not a recursive closure: a closure that refers to itself is a reference cycle
    # that would keep the parsed tree alive until the cyclic collector runs (tests/test_tree_release.py).
    if isinstance(target, (cst.Tuple, cst.List)):
        values = value.elements if isinstance(value, (cst.Tuple, cst.List)) and kind not in _ITERATING else None
        if values is not None and (len(values) != len(target.elements) or any(
                isinstance(e, cst.StarredElement) for e in (*values, *target.elements))):
            values = None  # `a, *b = x, y, z`, `a, b = *xs,`: elements are not paired by position
        for index, el in enumerate(target.elements):
            inner = values[index].value if values is not None and index < len(values) else value
            _decompose(found, el.value, inner, statement, branch,
                       BindingKind.UNPACK if kind is BindingKind.ASSIGN else kind,
                       None if values is not None else index, (*path, index), isinstance(el, cst.StarredElement),
                       source)
        return
    if isinstance(target, cst.StarredElement):
        _decompose(found, target.value, value, statement, branch, kind, element, path, True, source)
        return
    name = dotted_name(target)
    if name is not None:
        found.append(Binding(name, value, statement, branch, kind, element, source, path, starred))


# `for a, b in (x, y)`: a and b are parts of each element in turn, not x and y.
_ITERATING = frozenset({BindingKind.FOR, BindingKind.COMPREHENSION})
# Final node classes: a type lookup, not isinstance against LibCST's abstract bases (5x the cost).
_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp})


def _own_parts(node: cst.CSTNode) -> list[cst.CSTNode]:
    """What a statement evaluates itself: a simple statement whole, a compound one's header (its body's
    statements are statements of the scope in their own right)."""
    if isinstance(node, cst.SimpleStatementLine):
        return [node]
    if isinstance(node, cst.With):
        return [item.item for item in node.items]
    if isinstance(node, cst.For):
        return [node.iter]
    if isinstance(node, (cst.If, cst.While)):
        return [node.test]
    return []
