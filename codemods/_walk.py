"""Fast read-only tree walks for rules, without ``node.visit`` and without ``libcst.matchers``.

``node.visit(SomeCSTVisitor())`` rebuilds every node of the tree even when the
visitor changes nothing (``_visit_and_replace_children`` constructs a new node
per node, then throws it away): on tf-models it cost ten times a plain walk, and
the float16 analyses walked each module three or four times that way
(``mpfix check`` cold took 3.9x parsing everything with LibCST). ``node.children``
goes through the same machinery. ``libcst.matchers`` takes ~0.3 s to import (one
generated module per node type), more than everything else a one-file
pre-commit run imports besides LibCST.

Here a node's children are read straight from its dataclass fields, in the order
its own ``_visit_and_replace_children`` visits them — source order, which is not
declaration order (``FunctionDef`` declares ``decorators`` after ``body``). That
order is read once per node type from the method's constants: it names each
field as a string literal (``visit_sequence(self, "decorators", ...)``) in the
order it visits them. ``tests/test_walk.py`` checks the result equals
LibCST's own visit order on real files.

Most walks skip *trivia*: whitespace, comments, brackets, commas, dots, colons
and operator tokens. They hold no code (a ``Comma`` holds only whitespace), are
over half the nodes of a tree, and no rule looks for them. A search or visitor
that asks for a trivia type gets the full walk.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator

import libcst as cst

# Node types that hold no code. Their subtrees contain only other trivia.
TRIVIA: frozenset[type[cst.CSTNode]] = frozenset({
    cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace, cst.EmptyLine,
    cst.Newline, cst.Comment,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
    cst.LeftCurlyBrace, cst.RightCurlyBrace, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon,
    cst.AssignEqual, cst.Asynchronous,
})
_TRIVIA_BASES: tuple[type, ...] = (
    cst.BaseParenthesizableWhitespace, cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp,
    cst.BaseUnaryOp, cst.BaseAugOp, *TRIVIA,
)
# type(value) -> is it a CSTNode? ``isinstance(x, cst.CSTNode)`` goes through ABCMeta's
# __instancecheck__ (CSTNode is an ABC): 7.6M such calls were 3.5 s of a profiled tfm check.
_IS_NODE: dict[type, bool] = {}


def _is_node_type(value_type: type) -> bool:
    found = _IS_NODE[value_type] = issubclass(value_type, cst.CSTNode)
    return found


def is_trivia_type(node_type: type) -> bool:
    return issubclass(node_type, _TRIVIA_BASES)


def _node_classes(annotation) -> Iterator[type]:
    """The CSTNode classes an annotation (``Sequence[Arg]``, ``Union[Comma, MaybeSentinel]``) can hold."""
    if isinstance(annotation, type):
        if issubclass(annotation, cst.CSTNode):
            yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _node_classes(arg)


def _visit_order(node_type: type[cst.CSTNode]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every node field, the fields that can hold code) of ``node_type``, in visit order."""
    names = {f.name for f in dataclasses.fields(node_type)}
    code = node_type._visit_and_replace_children.__code__
    order: list[str] = []
    for const in code.co_consts:
        if isinstance(const, str) and const in names and const not in order:
            order.append(const)
    # Which fields can hold code is read from the annotations: no field mixes trivia and code
    # (``Call.lpar`` holds only LeftParens, ``Arg.comma`` a Comma or MaybeSentinel).
    hints = typing.get_type_hints(node_type)
    syntax = tuple(
        name for name in order
        if any(not is_trivia_type(c) for c in _node_classes(hints.get(name)))
    )
    return tuple(order), syntax


_ALL_FIELDS: dict[type, tuple[str, ...]] = {}
_SYNTAX_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(node_type: type, trivia: bool) -> tuple[str, ...]:
    everything, syntax = _visit_order(node_type)
    _ALL_FIELDS[node_type] = everything
    _SYNTAX_FIELDS[node_type] = syntax
    return everything if trivia else syntax


# node type -> a function pushing a node's children onto a stack last-first (so they pop in source order),
# one per node type and trivia flag: the field reads unrolled, each checked as the generic loop checks it
# (a tuple or list: its items; a node: itself; anything else, None or a sentinel: nothing).
_PUSHERS: tuple[dict[type, Callable], dict[type, Callable]] = ({}, {})


def _pusher(node_type: type, trivia: bool) -> Callable:
    fields = (_ALL_FIELDS if trivia else _SYNTAX_FIELDS).get(node_type) or _fields(node_type, trivia)
    lines = ["def push_children(node, push, extend):"]
    for name in reversed(fields):
        lines += [f"    value = node.{name}",
                  "    value_type = type(value)",
                  "    if value_type is tuple or value_type is list:",
                  "        extend(reversed(value))",
                  "    elif is_node.get(value_type) or (value_type not in is_node and is_node_type(value_type)):",
                  "        push(value)"]
    lines.append("    return None")
    namespace = {"is_node": _IS_NODE, "is_node_type": _is_node_type}
    exec("\n".join(lines), namespace)  # field names are identifiers read from the dataclass
    found = _PUSHERS[trivia][node_type] = namespace["push_children"]
    return found


def children(node: cst.CSTNode, trivia: bool = False) -> list[cst.CSTNode]:
    """``node``'s child nodes in source order (``node.children`` without rebuilding anything)."""
    table = _ALL_FIELDS if trivia else _SYNTAX_FIELDS
    node_type = type(node)
    fields = table.get(node_type)
    if fields is None:
        fields = _fields(node_type, trivia)
    result: list[cst.CSTNode] = []
    is_node = _IS_NODE
    for name in fields:
        value = getattr(node, name)
        value_type = type(value)
        if value_type is tuple or value_type is list:
            result.extend(value)
        elif is_node.get(value_type) or (value_type not in is_node and _is_node_type(value_type)):
            result.append(value)
    return result


def walk(root: cst.CSTNode, trivia: bool = False) -> Iterator[cst.CSTNode]:
    """Every node under ``root`` (``root`` included), pre-order, in source order.

    Trivia (whitespace, brackets, commas, operator tokens) only with ``trivia=True``.
    """
    pushers = _PUSHERS[trivia]
    stack = [root]
    pop = stack.pop
    push = stack.append
    extend = stack.extend
    while stack:
        node = pop()
        yield node
        node_type = type(node)
        (pushers.get(node_type) or _pusher(node_type, trivia))(node, push, extend)


def find_all(root: cst.CSTNode, node_type: type[cst.CSTNode] | tuple[type[cst.CSTNode], ...],
             where: Callable[[cst.CSTNode], bool] | None = None) -> Iterator[cst.CSTNode]:
    """Every node of ``node_type`` under ``root`` (``root`` included), in source order."""
    types = node_type if isinstance(node_type, tuple) else (node_type,)
    trivia = any(_needs_trivia(t) for t in types)
    matches: dict[type, bool] = {}
    for node in walk(root, trivia):
        found = matches.get(type(node))
        if found is None:
            found = matches[type(node)] = issubclass(type(node), node_type)
        if found and (where is None or where(node)):
            yield node


def nodes_by_type(context) -> dict[type, list[cst.CSTNode]]:
    """Every (non-trivia) node of the module by exact type, in source order: one walk per file.

    Rules and analyses that need "every Call / Assign / FunctionDef in the module" share it
    through ``context.cache`` instead of walking the module again each.
    """
    cached = context.cache.get("_walk.nodes_by_type")
    if cached is not None and cached[0] is context.module:
        return cached[1]
    index: dict[type, list[cst.CSTNode]] = {}
    pushers = _PUSHERS[False]
    stack = [context.module]  # ``walk(context.module)``, inlined
    pop = stack.pop
    push = stack.append
    extend = stack.extend
    while stack:
        node = pop()
        node_type = type(node)
        found = index.get(node_type)
        if found is None:
            index[node_type] = [node]
        else:
            found.append(node)
        (pushers.get(node_type) or _pusher(node_type, False))(node, push, extend)
    context.cache["_walk.nodes_by_type"] = (context.module, index)
    return index


def _needs_trivia(node_type: type) -> bool:
    """A search for ``node_type`` can match trivia (``cst.Comma``, or a base such as ``cst.CSTNode``)."""
    return issubclass(node_type, _TRIVIA_BASES) or any(issubclass(b, node_type) for b in _TRIVIA_BASES)


def _is_trivia_name(type_name: str) -> bool:
    node_type = getattr(cst, type_name, None)
    return isinstance(node_type, type) and issubclass(node_type, cst.CSTNode) and _needs_trivia(node_type)


class Visitor:
    """A read-only ``cst.CSTVisitor`` look-alike over the fast walk.

    ``visit_<Type>(node)`` runs before a node's children and may return ``False`` to skip
    them; ``leave_<Type>(node)`` runs after. ``on_visit``/``on_leave`` can be overridden as
    on ``CSTVisitor``. Start with ``visitor.walk(node)`` (re-entrant: a visit method may walk
    a subtree itself). Trivia nodes are visited only if the class has a method for one of
    them, or sets ``trivia = True``.
    """

    trivia: typing.ClassVar[bool | None] = None

    def _uses_trivia(self) -> bool:
        cls = type(self)
        found = cls.__dict__.get("_trivia_resolved")
        if found is None:
            found = cls.trivia if cls.trivia is not None else any(
                _is_trivia_name(name.split("_", 1)[1])
                for name in dir(cls) if name.startswith(("visit_", "leave_")))
            cls._trivia_resolved = found
        return found

    def on_visit(self, node: cst.CSTNode) -> bool:
        method = getattr(self, "visit_" + type(node).__name__, None)
        return method is None or method(node) is not False

    def on_leave(self, node: cst.CSTNode) -> None:
        method = getattr(self, "leave_" + type(node).__name__, None)
        if method is not None:
            method(node)

    def walk(self, root: cst.CSTNode) -> None:
        trivia = self._uses_trivia()
        pushers = _PUSHERS[trivia]
        stack: list = [root]
        pop = stack.pop
        push = stack.append
        extend = stack.extend
        cls = type(self)
        if cls.on_visit is Visitor.on_visit and cls.on_leave is Visitor.on_leave:
            # The default dispatch, looked up once per node type and walk instead of once per node;
            # a node type without ``leave_`` gets no leave marker (the default on_leave does nothing).
            dispatch: dict[type, tuple] = {}
            while stack:
                item = pop()
                node_type = type(item)
                if node_type is tuple:
                    item[1](item[0])
                    continue
                entry = dispatch.get(node_type)
                if entry is None:
                    name = node_type.__name__
                    entry = dispatch[node_type] = (getattr(self, "visit_" + name, None),
                                                   getattr(self, "leave_" + name, None))
                visit, leave = entry
                if visit is not None and visit(item) is False:
                    if leave is not None:
                        leave(item)
                    continue
                if leave is not None:
                    push((item, leave))
                (pushers.get(node_type) or _pusher(node_type, trivia))(item, push, extend)
            return
        on_visit = self.on_visit
        on_leave = self.on_leave
        while stack:
            item = pop()
            node_type = type(item)
            if node_type is tuple:
                on_leave(item[0])
                continue
            if not on_visit(item):
                on_leave(item)
                continue
            push((item,))
            (pushers.get(node_type) or _pusher(node_type, trivia))(item, push, extend)


def visit_batched(wrapper: "cst.MetadataWrapper", visitors: list) -> None:
    """``wrapper.visit_batched(visitors)`` over the fast walk: the engine's one traversal per file.

    Same contract as LibCST's batched traversal: every node in source order, each visitor's
    ``visit_<Type>`` before the node's children (return value ignored) and ``leave_<Type>``
    after them, visitors in the order given. Trivia are walked only if a visitor has a method
    for a trivia type. Visitors that need what only LibCST's traversal gives — metadata
    (``METADATA_DEPENDENCIES``) or attribute methods (``visit_Call_func``) — get it.
    """
    methods: dict[str, list] = {}
    for visitor in visitors:
        for name, method in visitor.get_visitors().items():
            methods.setdefault(name, []).append(method)
    type_names = [name.split("_", 1)[1] for name in methods]
    if any(getattr(v, "METADATA_DEPENDENCIES", ()) for v in visitors) or not all(
            isinstance(getattr(cst, n, None), type) and issubclass(getattr(cst, n), cst.CSTNode) for n in type_names):
        wrapper.visit_batched(visitors)
        return
    if all(name == "visit_Module" or name == "leave_Module" for name in methods):
        # Only the root has methods (most float16 rules query their facts from visit_Module): walking
        # the rest of the tree would call nothing. Visits, then leaves, each in the visitors' order.
        module = wrapper.module
        for method in methods.get("visit_Module", ()):
            method(module)
        for method in methods.get("leave_Module", ()):
            method(module)
        return
    trivia = any(_is_trivia_name(n) for n in type_names)
    pushers = _PUSHERS[trivia]
    dispatch: dict[type, tuple[tuple, tuple]] = {}
    none: tuple = ()
    stack: list = [wrapper.module]
    pop = stack.pop
    push = stack.append
    extend = stack.extend
    while stack:
        node = pop()
        node_type = type(node)
        if node_type is tuple:
            for method in node[1]:
                method(node[0])
            continue
        entry = dispatch.get(node_type)
        if entry is None:
            name = node_type.__name__
            entry = dispatch[node_type] = (tuple(methods.get("visit_" + name, none)),
                                           tuple(methods.get("leave_" + name, none)))
        for method in entry[0]:
            method(node)
        if entry[1]:
            push((node, entry[1]))
        (pushers.get(node_type) or _pusher(node_type, trivia))(node, push, extend)
