"""Code under a TensorFlow version guard: the branch exists for one TensorFlow/Keras version.

``if version.parse(tf.__version__) < version.parse("2.4"): mixed_precision.experimental...`` is
right on the versions that branch runs on; rewriting it to the new API breaks exactly those
(issue 20, class 2). This fact says, for any node, which guarded branch holds it and on which side
of the guard it is:

* comparisons of the TensorFlow/Keras version: ``version.parse(tf.__version__) < ...``,
  ``LooseVersion(tf.__version__) >= ...``, ``tuple(map(int, tf.__version__.split(".")[:2])) < (2, 4)``,
  ``int(tf.__version__.split(".")[1]) < 9``, ``tf.__version__ < "2.4"``, ``tf.version.VERSION``,
  and module-level names bound to either (``TF_VERSION = version.parse(tf.__version__)``,
  ``IS_OLD_TF = TF_VERSION < ...``);
* ``tf.__version__.startswith("2.2")``: the branch runs on one version;
* ``hasattr(mixed_precision, "experimental")``: the old API exists (``_api_table``'s old names)
  or the new one does (its new names);
* ``try: <probe> except (AttributeError, ImportError): <fallback>``: a short ``try`` whose
  handler offers an alternative rather than re-raising or exiting;
* a test of anything whose two branches use the two Keras generations' members of a pair that exists in one
  generation each (``opt.scale_loss(l) if KERAS3 else opt.get_scaled_loss(l)``): only the installed Keras
  picks the branch, each is right where it runs (either side), and a module-level name such a switch tests
  is a flag wherever else it is tested;

and the ``else`` of each (the other side), the statements after an ``if`` guard whose body returns
or raises (the other side too), and both arms of ``a if <version test> else b``. ``guard_of(node)`` answers with the innermost guard.
Rules that move APIs between versions (MP3) stay silent on the OLD side and write no fix elsewhere
under a guard (``Side.NEW``/``Side.EITHER``): which way the branch should go is the guard's business.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import libcst as cst

from mpfix.codemods._walk import find_all
from mpfix.codemods.names import canonical, dotted_name

_VERSION_ATTRIBUTES = frozenset({"__version__", "VERSION"})
_VERSIONED = ("tensorflow", "keras")  # canonical prefixes whose version a guard may test
_CATCHES = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "TypeError"})
_PROBE_STATEMENTS = 6  # a try body longer than this wraps a program, not a feature probe
_CACHE_KEY = "mpfix.codemods.analysis.version_guards"


class Side(enum.Enum):
    """Which versions a guarded branch runs on."""

    OLD = "old"  # only older TensorFlow/Keras (``< X``, the old API exists, one given old version)
    NEW = "new"  # only newer ones (``>= X``, the new API exists)
    EITHER = "either"  # one side of a feature probe (try/except), or a version equality


@dataclass(frozen=True)
class VersionGuard:
    """The guard of one branch: the statement (If/Try), how it tests, and the branch's side."""

    statement: cst.CSTNode
    kind: str  # "compare", "startswith", "hasattr", "try", "branches"
    side: Side

    def describe(self) -> str:
        what = {"compare": "a TensorFlow version check", "startswith": "a TensorFlow version check",
                "hasattr": "an API-presence check (hasattr)", "try": "a try/except fallback",
                "branches": "a switch between the Keras generations' APIs"}[self.kind]
        return f"under {what}, in the branch for the {self.side.value} version"


_FLIP = {Side.OLD: Side.NEW, Side.NEW: Side.OLD, Side.EITHER: Side.EITHER}


def _api_names() -> tuple[frozenset[str], frozenset[str]]:
    from mpfix.codemods import _api_table as table

    old = {change.old_last for change in table.API_CHANGES}
    new = {target.rpartition(".")[2] for change in table.API_CHANGES for target in change.new.values() if target}
    # The table translates both ways between the Keras generations (`scale_loss` <-> `get_scaled_loss`), so
    # such names are on both sides there and drop out; these decide which generation's they are.
    known_old = {"experimental", "get_scaled_loss", "get_unscaled_gradients", "experimental_relax_shapes",
                 "experimental_run_functions_eagerly", "experimental_compile"}
    known_new = {"scale_loss", "reduce_retracing", "run_functions_eagerly", "jit_compile", "set_global_policy"}
    return frozenset((old - new - known_new) | known_old), frozenset((new - old - known_old) | known_new)


def _generation_members() -> tuple[frozenset[str], frozenset[str]]:
    """(Keras 2's, Keras 3's) members that exist in one generation only: the table moves them to the other
    generation alone (``get_scaled_loss`` -> Keras 3's ``scale_loss``; ``scale_loss`` -> Keras 2's
    ``get_scaled_loss``). Which one a program can call is decided by the installed Keras, never by a setting."""
    from mpfix.codemods import _api_table as table

    members: dict[int, set[str]] = {table.KERAS2: set(), table.KERAS3: set()}
    for change in table.API_CHANGES:
        if change.kind == "member" and len(change.new) == 1:
            (moved_to,) = change.new
            members[table.KERAS2 if moved_to == table.KERAS3 else table.KERAS3].add(change.old_last)
    return frozenset(members[table.KERAS2]), frozenset(members[table.KERAS3])


class VersionGuards:
    """Every guarded branch of one module (computed once per module: ``of(context)``)."""

    def __init__(self, module: cst.Module, resolve) -> None:
        self._resolve = resolve
        self._guard: dict[int, VersionGuard] = {}
        self._version_names: set[str] = set()
        self._flags: dict[str, tuple[str, Side]] = {}  # module-level names bound to a guard test: (kind, side)
        self._old_names, self._new_names = _api_names()
        self._keras2, self._keras3 = _generation_members()
        self._switching = self._both_generations(module)
        self._module_names(module)
        if self._switching:
            self._switch_flags(module)
        self._walk(module.body)
        self._conditional_expressions(module)

    # -- the public query --------------------------------------------------------------------
    def guard_of(self, node: cst.CSTNode) -> VersionGuard | None:
        """The innermost version guard whose branch holds ``node``; None when it is unguarded."""
        return self._guard.get(id(node))

    def __bool__(self) -> bool:
        return bool(self._guard)

    # -- recognising tests ------------------------------------------------------------------------
    def _is_version(self, node: cst.BaseExpression) -> bool:
        """``node`` computes from the TensorFlow/Keras version (``tf.__version__`` somewhere inside)."""
        for found in _subexpressions(node):
            if isinstance(found, cst.Name) and found.value in self._version_names:
                return True
            if isinstance(found, cst.Attribute) and found.attr.value in _VERSION_ATTRIBUTES:
                owner = found.value
                resolved = canonical(self._resolve(owner) or dotted_name(owner) or "")
                if resolved.startswith(_VERSIONED) or (dotted_name(owner) or "").split(".")[0] in ("tf", "keras"):
                    return True
        return False

    def side_of_test(self, test: cst.BaseExpression) -> tuple[str, Side] | None:
        """(kind, side of the ``if`` body) when ``test`` checks the TensorFlow version or API."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            found = self.side_of_test(test.expression)
            return None if found is None else (found[0], _FLIP[found[1]])
        if isinstance(test, cst.BooleanOperation):
            for part in (test.left, test.right):
                found = self.side_of_test(part)
                if found is not None:
                    return found[0], found[1] if isinstance(test.operator, cst.And) else Side.EITHER
            return None
        if isinstance(test, cst.Name) and test.value in self._flags:
            return self._flags[test.value]
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            target = test.comparisons[0]
            left_version, right_version = self._is_version(test.left), self._is_version(target.comparator)
            if left_version == right_version:
                return None
            operator = target.operator
            if isinstance(operator, (cst.LessThan, cst.LessThanEqual)):
                side = Side.OLD
            elif isinstance(operator, (cst.GreaterThan, cst.GreaterThanEqual)):
                side = Side.NEW
            elif isinstance(operator, (cst.Equal, cst.NotEqual, cst.In, cst.NotIn)):
                return "compare", Side.EITHER
            else:
                return None
            return "compare", side if left_version else _FLIP[side]
        if isinstance(test, cst.Call):
            func = test.func
            if (isinstance(func, cst.Attribute) and func.attr.value == "startswith"
                    and self._is_version(func.value)):
                return "startswith", Side.OLD  # one given (older) version: its branch keeps its API
            if isinstance(func, cst.Name) and func.value == "hasattr" and len(test.args) == 2:
                name = test.args[1].value
                if isinstance(name, cst.SimpleString) and isinstance(name.evaluated_value, str):
                    attribute = name.evaluated_value
                    if attribute in self._old_names:
                        return "hasattr", Side.OLD
                    if attribute in self._new_names:
                        return "hasattr", Side.NEW
        return None

    def _module_names(self, module: cst.Module) -> None:
        """``TF_VERSION = version.parse(tf.__version__)`` and ``IS_OLD = TF_VERSION < ...`` at module level."""
        for stmt in module.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Name)):
                    continue
                name = small.targets[0].target.value
                found = self.side_of_test(small.value)
                if found is not None:
                    self._flags[name] = found
                elif self._is_version(small.value):
                    self._version_names.add(name)

    # -- a switch the branches reveal ---------------------------------------------------------------
    def _both_generations(self, module: cst.Module) -> bool:
        """The module calls members of each Keras generation (``.scale_loss`` and ``.get_scaled_loss``): a switch
        between them may be written under a test no rule above knows."""
        members = _members(module)
        return not members.isdisjoint(self._keras2) and not members.isdisjoint(self._keras3)

    def _switch(self, body: cst.CSTNode, orelse: cst.CSTNode | None) -> tuple[str, Side] | None:
        """("branches", EITHER) when one branch uses only Keras 2's members of the pairs that exist in one generation
        each and the other only Keras 3's (``opt.scale_loss(l) if KERAS3 else opt.get_scaled_loss(l)``): only the
        installed Keras decides which one runs, so whatever the test reads (a class's ``__module__``, a helper), it
        tells the generation, and each branch is right where it runs (sharded_spend.py: MP303 rewrote the Keras 3
        branch to ``get_scaled_loss``, turn 18). A choice between a removed API and its replacement is not such a
        switch: a setting may pick the removed one (tf-models' ncf: ``--fp16_implementation graph_rewrite``)."""
        if not self._switching or orelse is None:
            return None
        generations = []
        for members in (_members(body), _members(orelse)):
            two, three = not members.isdisjoint(self._keras2), not members.isdisjoint(self._keras3)
            if two == three:
                return None  # neither generation's members, or both: not a switch between them
            generations.append(three)
        return ("branches", Side.EITHER) if generations[0] != generations[1] else None

    def _switch_flags(self, module: cst.Module) -> None:
        """A module-level name tested by such a switch (``KERAS3 = keras.layers.Dense.__module__...``) tells the
        generation wherever else it is tested (``if MIXED and not KERAS3: ...get_unscaled_gradients``)."""
        bound = {small.targets[0].target.value for stmt in module.body if isinstance(stmt, cst.SimpleStatementLine)
                 for small in stmt.body if isinstance(small, cst.Assign) and len(small.targets) == 1
                 and isinstance(small.targets[0].target, cst.Name)}
        for node in [*find_all(module, cst.If), *find_all(module, cst.IfExp)]:
            test = node.test
            while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test = test.expression
            if isinstance(test, cst.Name) and test.value in bound and test.value not in self._flags and \
                    self.side_of_test(node.test) is None and self._switch(node.body, node.orelse) is not None:
                self._flags[test.value] = ("branches", Side.EITHER)

    # -- walking branches -------------------------------------------------------------------------
    def _walk(self, body) -> None:
        body = list(body)
        for index, stmt in enumerate(body):
            if isinstance(stmt, cst.If):
                guard = self._if(stmt)
                if guard is not None and stmt.orelse is None and _leaves(stmt.body):
                    # ``if <new TF>: ...; return`` then the old API: what follows is the other branch.
                    for later in body[index + 1:]:
                        self._mark(later, VersionGuard(stmt, guard.kind, _FLIP[guard.side]))
            elif isinstance(stmt, cst.Try):
                self._try(stmt)
            for child in _blocks(stmt):
                self._walk(child)

    def _if(self, stmt: cst.If) -> VersionGuard | None:
        found = self.side_of_test(stmt.test) or self._switch(stmt.body, stmt.orelse)
        if found is None:
            return None
        kind, side = found
        guard = VersionGuard(stmt, kind, side)
        self._mark(stmt.body, guard)
        if stmt.orelse is not None:
            # ``elif``/``else``: the other side of the guard (a further elif test is marked on its own).
            self._mark(stmt.orelse, VersionGuard(stmt, kind, _FLIP[side]))
        return guard

    def _conditional_expressions(self, module: cst.Module) -> None:
        """``a if <version test> else b``: ``a`` and ``b`` are the two branches."""
        # The fast walk's pre-order is LibCST's visit order (tests/test_walk.py), without rebuilding the tree.
        found_nodes: list[cst.IfExp] = list(find_all(module, cst.IfExp))
        for node in found_nodes:  # outer first (visit order), so an inner guard overwrites
            found = self.side_of_test(node.test) or self._switch(node.body, node.orelse)
            if found is not None:
                self._mark(node.body, VersionGuard(node, found[0], found[1]))
                self._mark(node.orelse, VersionGuard(node, found[0], _FLIP[found[1]]))

    def _try(self, stmt: cst.Try) -> None:
        body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
        if not body or len(body) > _PROBE_STATEMENTS:
            return
        fallbacks = [h for h in stmt.handlers if _catches_probe(h) and _offers_alternative(h)]
        if not fallbacks:
            return
        self._mark(stmt.body, VersionGuard(stmt, "try", Side.EITHER))
        for handler in fallbacks:
            self._mark(handler.body, VersionGuard(stmt, "try", Side.EITHER))

    def _mark(self, block: cst.CSTNode, guard: VersionGuard) -> None:
        for node in _descendants(block):
            self._guard[id(node)] = guard  # walked outer first: an inner guard overwrites it


def of(context) -> VersionGuards:
    """The module's version guards, computed once per file (``context.cache``)."""
    guards = context.cache.get(_CACHE_KEY)
    if guards is None:
        guards = context.cache[_CACHE_KEY] = VersionGuards(context.module, context.resolve)
    return guards


def guard_of(context, node: cst.CSTNode) -> VersionGuard | None:
    """The innermost TensorFlow version guard of ``node`` in ``context``'s module, or None."""
    return of(context).guard_of(node)


def _leaves(block: cst.BaseSuite) -> bool:
    """The block's last statement leaves it (``return``, ``raise``, ``continue``, ``break``)."""
    body = block.body
    last = body[-1] if isinstance(body, (list, tuple)) and body else None
    if isinstance(last, cst.SimpleStatementLine) and last.body:
        last = last.body[-1]
    return isinstance(last, (cst.Return, cst.Raise, cst.Continue, cst.Break))


def _catches_probe(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return False
    names = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    for element in names:
        value = element.value if isinstance(element, cst.Element) else element
        if (dotted_name(value) or "").rpartition(".")[2] in _CATCHES:
            return True
    return False


def _offers_alternative(handler: cst.ExceptHandler) -> bool:
    """The handler does something instead (not only ``raise``, ``pass``, ``sys.exit``/``print``)."""
    body = handler.body.body if isinstance(handler.body, cst.IndentedBlock) else handler.body.body
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Raise, cst.Pass)):
                    continue
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and (
                        dotted_name(small.value.func) or "") in ("print", "sys.exit", "exit", "warnings.warn",
                                                                 "logging.warning", "logger.warning"):
                    continue
                return True
        else:
            return True
    return False


def _blocks(stmt: cst.CSTNode):
    """The statement lists nested in ``stmt`` (bodies, else, handlers, finally)."""
    for attr in ("body", "orelse", "finalbody"):
        child = getattr(stmt, attr, None)
        if isinstance(child, cst.BaseSuite):
            inner = child.body
            if isinstance(inner, (list, tuple)):
                yield inner
        elif isinstance(child, (cst.If, cst.Else, cst.Finally)):
            yield [child] if isinstance(child, cst.If) else (child.body.body if isinstance(child.body, cst.IndentedBlock) else ())
    for handler in getattr(stmt, "handlers", ()) or ():
        if isinstance(handler.body, cst.IndentedBlock):
            yield handler.body.body


class _Collect(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.found.append(node)
        return True


def _descendants(node: cst.CSTNode) -> list[cst.CSTNode]:
    collector = _Collect()
    node.visit(collector)
    return collector.found


def _subexpressions(node: cst.CSTNode) -> list[cst.CSTNode]:
    return _descendants(node)


def _members(node: cst.CSTNode) -> set[str]:
    """Every attribute name read in ``node`` (``opt.scale_loss``: ``scale_loss``)."""
    return {a.attr.value for a in find_all(node, cst.Attribute)}
