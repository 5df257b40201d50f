"""A region's tables: what one walk of a function body records for the dtype inference (``_Collector``).

Each function the dtype analysis looks at is a ``Region``; its name tables (``assigned``, ``unpacked``,
``iterated``, ``augmented``) are filled from the ``Binding`` records of ``bindings.decompose`` (the one
target decomposition) and hold the bindings of that function's own scope, as ``bindings.Bindings``
does: a nested ``def`` is a region of its own (``Region.closure``), walked where it stands, whose tables
read through to the enclosing function's (``ChainMap``: a name the closure does not bind is the outer
one's), and a ``nonlocal`` name's bindings are the enclosing function's.
"""

from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass, field
from enum import Enum

import libcst as cst

from mpfix.codemods._walk import Visitor, walk
from mpfix.codemods.analysis.bindings import BindingKind, decompose
from mpfix.codemods.analysis.dtype_lattice import Dtype
from mpfix.codemods.analysis.dtype_syntax import mentions
from mpfix.codemods.facts import heuristics


class RegionKind(str, Enum):
    """What a function is to the float16 analysis (a ``str``: compares equal to its value)."""

    LAYER_CALL = "layer-call"  # a Keras layer's ``call`` (autocast inputs)
    TRAIN_STEP = "train-step"
    LOSS = "loss"
    TF_FUNCTION = "tf-function"
    HELPER = "helper"  # a function or method a float16 region calls
    MODULE_CALL = "module-call"  # a ``tf.Module``'s ``__call__``: no autocast
    MODULE_HELPER = "module-helper"
    MODULE = "module"  # top-level code: never float16 compute
    SHADOW = "shadow"  # a function float16 does not reach, analysed for its return dtype


@dataclass
class Region:
    """A function body (or the module's top-level code) float16 tensors can reach."""

    node: cst.CSTNode
    kind: RegionKind
    in_class: bool = False  # a method: ``self.compute_dtype`` is available
    owner: cst.ClassDef | None = None
    # A method of a Keras layer/model class (``call`` and what it calls): inputs are autocast to
    # the compute dtype, so a hand-made float32 tensor there is a bug (MP206), not evidence.
    layer_method: bool = False
    dtype_aware: bool = False  # tests a dtype against float16 somewhere: its constants are guarded
    env: dict[str, Dtype] = field(default_factory=dict)
    assigned: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    binops: list[cst.BinaryOperation] = field(default_factory=list)
    calls: list[cst.Call] = field(default_factory=list)  # in source order, nested classes excluded
    params: dict[str, Dtype] = field(default_factory=dict)  # dtypes learnt from the file's call sites
    nested: dict[str, cst.FunctionDef] = field(default_factory=dict)  # closures defined inside
    unpacked: dict[str, list[tuple[cst.BaseExpression, int]]] = field(default_factory=dict)
    iterated: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)  # `for x in value`: x's values
    # One entry per ``ELEMENT`` a tuple target binds, in source order: (value, index) where the element is taken
    # by position (`a, b = v`), (value, None) where nobody indexes it (`a, *b = v`, `(a, b), c = v`, `for a, b in v`).
    elements: dict[str, list[tuple[cst.BaseExpression, int | None]]] = field(default_factory=dict)
    returns: list[cst.BaseExpression] = field(default_factory=list)
    memo: dict[int, Dtype] = field(default_factory=dict)
    augmented: set[int] = field(default_factory=set)  # values of `x += value`: x keeps its dtype too
    # Parameters are what this file's callers pass (unknown without one): a library's loss helpers
    # and tf.functions get whatever their callers elsewhere made of the model outputs (often float32).
    callers_decide: bool = False
    param_dtypes: dict[str, Dtype] = field(default_factory=dict)
    # A Keras loss's parameters its callers decide (tf_keras y_true/y_pred, every loss's options): learnt below.
    caller_params: set[str] = field(default_factory=set)
    # Parameters every call site in the file passes float16: float32-by-use (a guess for parameters nobody
    # passes) does not override them; their mix with a float32 tensor is the bug, not evidence.
    passed_float16: set[str] = field(default_factory=set)
    spelled: dict[str, Dtype] = field(default_factory=dict)  # `dtype` parameters: what every caller spells
    # The region of the function this one is a closure of: names it reads but does not bind are that one's.
    enclosing: "Region | None" = None
    # Parameters some caller (this file or another: ``ProjectFileFacts.cross_calls``) hands an instance of a
    # project Keras layer/model class: calling one returns the compute dtype.
    layer_params: frozenset[str] = frozenset()
    # A nested `def` walked where it stands (``_Collector``): its parameters are what the enclosing region passes
    # (``NameDtypes._closure_params``); its tables read through to the enclosing ones. ``closures``: those of this one.
    closure: bool = False
    closures: list["Region"] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kind = RegionKind(self.kind)

    @property
    def name(self) -> str:
        return self.node.name.value if isinstance(self.node, cst.FunctionDef) else "<module>"


# Placeholder values in a region's assignment table.
FLOAT32_VARIABLE = cst.Name("__float32_variable__")
ELEMENT = cst.Name("__element__")
ENTERED = cst.Name("__entered__")  # `with cm as x`: what `cm.__enter__()` returns (a tape, a scope): no tensor


class _Collector(Visitor):
    """One walk of a region: parents, guarded nodes, assignments (nested classes excluded)."""

    def __init__(self, analysis, region: Region, register: bool = True, guard_depth: int = 0) -> None:
        super().__init__()
        self.analysis = analysis  # the ``RegionFinder``
        self.region = region
        self.register = register
        self.guard_depth = guard_depth  # a closure under its enclosing function's dtype test is guarded too
        self.declared_nonlocal: set[str] = set()
        self.nested_depth = 0
        self.guard_nodes: list[cst.CSTNode] = []
        self.path: list[cst.CSTNode] = []  # the nodes being visited, root first: parents for free

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Exact type tests: LibCST node classes are ABCs, and isinstance on them costs 4x `is`.
        analysis = self.analysis
        region = self.region
        node_type = type(node)
        path = self.path
        if self.register and path:
            analysis.parent[node] = path[-1]
        path.append(node)  # on_leave pops it, also for a skipped subtree
        if node is not region.node:
            if node_type is cst.ClassDef:
                if region.kind != "module":
                    self._class_nonlocals(node)
                return False
            if node_type is cst.FunctionDef:
                self.nested_depth += 1  # its returns are its own (on_leave undoes it, also when skipped)
                if region.kind == "module":
                    return False
                region.nested[node.name.value] = node
                child = analysis._closure_region(node, region, self.register)
                if child is not None:  # its own scope: its own tables, walked here (source order kept)
                    _Collector(analysis, child, self.register, self.guard_depth).walk(node)
                    region.closures.append(child)
                return False  # a nested def with a region of its own (a seed) is walked as that one
        if self.register:
            analysis.region_of[node] = region
            analysis.order[node] = len(analysis.order)
            if self.guard_depth:
                analysis.guarded.add(node)
        if node_type not in _TABLED:
            return True
        if node_type is cst.Call:
            region.calls.append(node)
        elif node_type is cst.BinaryOperation:
            region.binops.append(node)
        elif node_type is cst.Return:
            if node.value is not None and not self.nested_depth:
                region.returns.append(node.value)
        elif node_type is cst.If or node_type is cst.IfExp or node_type is cst.While:
            test = node.test
            # The words first (a walk of the test's tokens), the code only where one is there.
            if mentions(test, heuristics.GUARD_WORDS) and heuristics.GUARD.search(code := analysis.code(test)):
                self.guard_depth += 1
                self.guard_nodes.append(node)
                if node_type is cst.If and heuristics.FLOAT16_TEST.search(code):
                    region.dtype_aware = True
        elif node_type is cst.Assign:
            for target in node.targets:
                self._bind(target.target, node.value, node, BindingKind.ASSIGN)
        elif (node_type is cst.AnnAssign or node_type is cst.AugAssign) and node.value is not None:
            self._bind(node.target, node.value, node,
                       BindingKind.AUGMENTED if node_type is cst.AugAssign else BindingKind.ANNOTATED)
            if node_type is cst.AugAssign:
                region.augmented.add(id(node.value))
        elif node_type is cst.For:
            self._bind(node.target, node.iter, node, BindingKind.FOR)
        elif node_type is cst.CompFor:
            self._bind(node.target, node.iter, node, BindingKind.COMPREHENSION)
        elif node_type is cst.With:
            for item in node.items:
                if item.asname is not None:
                    self._bind(item.asname.name, item.item, node, BindingKind.WITH)
        elif node_type is cst.Nonlocal:
            self.declared_nonlocal.update(n.name.value for n in node.names)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.path.pop()
        if type(original_node) is cst.FunctionDef and original_node is not self.region.node:
            self.nested_depth -= 1
        if self.guard_nodes and self.guard_nodes[-1] is original_node:
            self.guard_nodes.pop()
            self.guard_depth -= 1

    def _returns_variables(self, value: cst.BaseExpression) -> bool:
        """``self._freeze_vars()``: a same-class method every ``return`` of which is variables by the same test
        as an iterable's own text (``self.trainable_variables``, ``[v for v in self.trainable_variables if ...]``)."""
        owner = self.region.owner
        if owner is None or not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute) or \
                not isinstance(value.func.value, cst.Name) or value.func.value.value != "self":
            return False
        method = self.analysis.methods.get(owner, {}).get(value.func.attr.value)
        if method is None:
            return False
        module = self.analysis.module
        returns = [n.value for n in walk(method) if isinstance(n, cst.Return)]
        return bool(returns) and all(r is not None and heuristics.VARIABLES_ITERABLE.search(module.code_for_node(r))
                                     for r in returns)

    def _class_nonlocals(self, cls: cst.ClassDef) -> None:
        """A method of a class defined in this function that declares ``nonlocal x`` binds this function's x (as in
        ``Bindings``): its assignments of x join this function's table (the class itself is walked nowhere here)."""
        for method in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ():
            if not isinstance(method, cst.FunctionDef):
                continue
            names = {n.name.value for node in walk(method) if type(node) is cst.Nonlocal for n in node.names}
            for node in walk(method) if names else ():
                if type(node) is cst.Assign:
                    for target in node.targets:
                        self._bind(target.target, node.value, node, BindingKind.ASSIGN, names)
                elif type(node) is cst.AugAssign or (type(node) is cst.AnnAssign and node.value is not None):
                    if type(node) is cst.AugAssign and isinstance(node.target, cst.Name) and node.target.value in names:
                        self.region.augmented.add(id(node.value))
                    self._bind(node.target, node.value, node, BindingKind.AUGMENTED if type(node) is cst.AugAssign
                               else BindingKind.ANNOTATED, names)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression, statement: cst.CSTNode,
              kind: BindingKind, only: set[str] | None = None) -> None:
        """The region's tables from the target's ``Binding`` records (``bindings.decompose``, the one
        decomposition): every plain name the scope binds (attributes and subscripts are the class's or
        the object's); a name paired with an element of a literal tuple (``a, b = x, y``) is that element
        (and still unpacked from the tuple); another unpacked name is an ``ELEMENT`` of the whole value at
        its index (one deeper in nested tuples: an ``ELEMENT`` nobody indexes); a ``with ... as`` name is
        what ``__enter__`` gave."""
        region = self.region
        iterating = kind is BindingKind.FOR or kind is BindingKind.COMPREHENSION
        for binding in decompose(target, value, statement, (), kind):
            name, path = binding.name, binding.path
            if "." in name or (not path and binding.starred) or (only is not None and name not in only):
                continue
            # `nonlocal x` in a closure: x is the enclosing function's (a ChainMap writes to its first map).
            tables = region.enclosing if name in self.declared_nonlocal and region.closure else region
            assigned = own(tables.assigned)
            if kind is BindingKind.WITH:
                assigned.setdefault(name, []).append(ENTERED)
            elif path and binding.element is None and not binding.starred:
                assigned.setdefault(name, []).append(binding.value)  # `a, b = x, y`: a is x (``decompose`` pairs them)
                if len(path) == 1:  # and element 0 of `x, y` (``unpacked_from``), as before
                    own(tables.unpacked).setdefault(name, []).append((binding.source, path[0]))
            elif path:
                assigned.setdefault(name, []).append(ELEMENT)
                indexed = not iterating and not binding.starred and len(path) == 1
                if indexed:
                    own(tables.unpacked).setdefault(name, []).append((binding.source, path[0]))
                own(tables.elements).setdefault(name, []).append((binding.source, path[0] if indexed else None))
            elif iterating:
                # for v in model.trainable_variables: float32 variables, safe to reduce.
                code = self.analysis.module.code_for_node(value)
                variables = heuristics.VARIABLES_ITERABLE.search(code) or self._returns_variables(value)
                assigned.setdefault(name, []).append(FLOAT32_VARIABLE if variables else ELEMENT)
                if not variables:
                    own(tables.iterated).setdefault(name, []).append(value)
            else:
                assigned.setdefault(name, []).append(value)


# The node types ``_Collector.on_visit`` records something of (every other node: its parent, region and order only).
_TABLED = frozenset({cst.Call, cst.BinaryOperation, cst.Return, cst.If, cst.IfExp, cst.While, cst.Assign, cst.AnnAssign,
                     cst.AugAssign, cst.For, cst.CompFor, cst.With, cst.Nonlocal})


def own(table: dict) -> dict:
    """A region's own part of one of its tables (a nested function's read through to the enclosing ones)."""
    return table.maps[0] if isinstance(table, ChainMap) else table
