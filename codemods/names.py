"""Resolve names to dotted paths with a light table of the module's own imports.

LibCST's ``QualifiedNameProvider`` costs about ten times the parse on real
code (see DESIGN.md), and mixed-precision rules only need to know what a
dotted expression such as ``mp.LossScaleOptimizer`` or ``tf.keras.optimizers.Adam``
refers to. The table is flow-insensitive: every import anywhere in the file
counts, which is what scripts that import inside ``main()`` need.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import libcst as cst

from mpfix.keras_spellings import KERAS_ALIASES

# Every spelling of Keras, mapped to one canonical prefix so rules can say
# "keras.mixed_precision.LossScaleOptimizer" once (the aliases are one table with the cross-file scan's).
_KERAS_PREFIXES = (*KERAS_ALIASES, "keras.src", "keras")


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def self_attribute(node: cst.CSTNode | None) -> str | None:
    """``x`` for ``self.x``, else None."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def canonical(qualified: str) -> str:
    """Fold the spellings of Keras into ``keras.…`` and drop TF's ``compat.v2``."""
    for prefix in _KERAS_PREFIXES:
        if qualified == prefix or qualified.startswith(prefix + "."):
            return "keras" + qualified[len(prefix):]
    if qualified.startswith("tensorflow.compat.v2."):
        return "tensorflow." + qualified[len("tensorflow.compat.v2."):]
    return qualified


def fold_compat_v2(qualified: str) -> str:
    """``tensorflow.compat.v2[.x]`` as ``tensorflow[.x]``: the same API under TensorFlow 2."""
    if qualified == "tensorflow.compat.v2" or qualified.startswith("tensorflow.compat.v2."):
        return "tensorflow" + qualified[len("tensorflow.compat.v2"):]
    return qualified


def bound_names(module: cst.Module) -> set[str]:
    """Every name an import, assignment, ``def``, ``class``, ``for`` or ``with`` binds anywhere in
    ``module`` (an over-approximation: a local counts too). An import a fix adds must not rebind one."""
    names: set[str] = set()

    def targets(node: cst.CSTNode) -> None:
        if isinstance(node, cst.Name):
            names.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                targets(element.value)
        elif isinstance(node, cst.StarredElement):
            targets(node.value)

    for stmt in _statements(module.body):
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            names.add(stmt.name.value)
        elif isinstance(stmt, cst.For):
            targets(stmt.target)
        elif isinstance(stmt, cst.With):
            for item in stmt.items:
                if item.asname is not None:
                    targets(item.asname.name)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        names.add(alias.evaluated_alias or alias.evaluated_name.split(".")[0])
                elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        names.add(alias.evaluated_alias or alias.evaluated_name)
                elif isinstance(small, cst.Assign):
                    for target in small.targets:
                        targets(target.target)
                elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                    targets(small.target)
    return names


def _statements(body: Iterable[cst.CSTNode]) -> Iterator[cst.CSTNode]:
    """Walk statements (not expressions) of every nested block: cheap.

    Pre-order: a statement, then its block's statements, its ``orelse``, ``finalbody`` and handlers,
    each walked the same way. A stack of iterators, not nested generators (``yield from`` passed every
    statement up through each level of nesting)."""
    stack = [iter(body)]
    while stack:
        stmt = next(stack[-1], _END)
        if stmt is _END:
            stack.pop()
            continue
        yield stmt
        parts: list = []
        inner = getattr(stmt, "body", None)
        if isinstance(inner, cst.BaseSuite):
            parts.extend(getattr(inner, "body", ()))
        elif isinstance(inner, (list, tuple)):
            parts.extend(inner)
        for attr in ("orelse", "finalbody"):
            other = getattr(stmt, attr, None)
            if other is not None:
                parts.extend([other] if not isinstance(other, (list, tuple)) else other)
        parts.extend(getattr(stmt, "handlers", ()) or ())
        if parts:
            stack.append(iter(parts))


_END = object()


class ImportTable:
    """Local name → dotted path, for every ``import``/``from … import`` in a module."""

    def __init__(self, module: cst.Module) -> None:
        self.aliases: dict[str, str] = {}
        self.modules: set[str] = set()
        for stmt in _statements(module.body):
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Import):
                        self._add_import(small)
                    elif isinstance(small, cst.ImportFrom):
                        self._add_import_from(small)
        self._add_alias_assignments(module.body)

    def _add_alias_assignments(self, body: Iterable[cst.CSTNode]) -> None:
        # `keras = tf.keras` / `layers = tf.keras.layers` at module level: common in scripts
        # that predate `from tensorflow import keras`. A name bound more than once is ambiguous.
        found: dict[str, str | None] = {}
        for stmt in body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if (isinstance(small, cst.Assign) and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Name)
                        and isinstance(small.value, (cst.Attribute, cst.Name))):
                    dotted = dotted_name(small.value)
                    head = dotted.partition(".")[0] if dotted else None
                    name = small.targets[0].target.value
                    if head in self.aliases and name not in self.aliases:
                        found[name] = None if name in found else self.aliases[head] + dotted[len(head):]
                elif isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                    targets = small.targets if isinstance(small, cst.Assign) else [small]
                    for t in targets:
                        if isinstance(t.target, cst.Name) and t.target.value in found:
                            found[t.target.value] = None
        self.aliases.update({name: path for name, path in found.items() if path is not None})

    def _add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            self.modules.add(full)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.aliases[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.aliases.setdefault(head, head)

    def _add_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative:
            return
        base = dotted_name(node.module) if node.module is not None else None
        if base is None:
            return
        self.modules.add(base)
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            name = dotted_name(alias.name)
            if name is None:
                continue
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.aliases[local] = f"{base}.{name}"

    def resolve(self, node: cst.BaseExpression) -> str | None:
        """The canonical dotted path ``node`` refers to, or None if not imported."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        base = self.aliases.get(head)
        if base is None:
            return None
        return canonical(f"{base}.{rest}" if rest else base)

    def imports_module(self, prefix: str) -> bool:
        """True if some import names ``prefix`` or a submodule of it."""
        return any(m == prefix or m.startswith(prefix + ".") for m in self.modules)

    def local_name_for(self, qualified: str) -> str | None:
        """The shortest expression in this module that spells ``qualified`` (raw, not canonical).

        ``import tensorflow.compat.v2 as tf`` spells ``tensorflow`` as ``tf``: compat.v2 is the
        TensorFlow 2 API itself (a fix that added ``import tensorflow as tf`` would rebind it).
        """
        best: str | None = None
        for local, full in self.aliases.items():
            full = fold_compat_v2(full)
            if qualified == full or qualified.startswith(full + "."):
                spelled = local + qualified[len(full):]
                if best is None or len(spelled) < len(best):
                    best = spelled
        return best
