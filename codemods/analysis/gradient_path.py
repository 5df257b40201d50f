"""Find custom training steps: where gradients are taken and where an optimizer applies them.

A training step here is a scope (a function, a method such as a ``train_step``
override, or the module's own top-level code) in which the output of
``tape.gradient(loss, vars)`` (or graph-mode ``tf.gradients(loss, vars)``)
flows into ``optimizer.apply_gradients(...)`` / ``optimizer.apply(...)``.
Each such link is a ``Flow``. The optimizer of a flow is traced back to where
it is built (``optimizer = tf.keras.optimizers.Adam()``, ``self.opt = ...``,
a same-module factory function, a module global, or one level of call-site
argument passing); ``model.optimizer`` / ``self.optimizer`` of a compiled
model count as wrapped, because ``compile`` wraps the optimizer in a
LossScaleOptimizer by itself under ``mixed_float16``.

The analysis walks statements itself (no scope or qualified-name metadata:
those cost ~10x the parse, see DESIGN.md) and is computed once per file and
shared by every loss-scaling rule through ``training_steps(context)``.

What it cannot follow, and reports as "unknown" rather than guessing: an
optimizer built in another module or passed through more than one call, an
optimizer kept in a container (``self.optimizers[0]``), and losses that are
not a plain name at the gradient call.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from mpfix.codemods._walk import children, walk
from mpfix.codemods.base import RuleContext
from mpfix.codemods.names import dotted_name

LSO = "keras.mixed_precision.LossScaleOptimizer"
_LSO_NAMES = {LSO, "keras.mixed_precision.experimental.LossScaleOptimizer"}
SCALE_METHODS = ("scale_loss", "get_scaled_loss")
UNSCALE_METHOD = "get_unscaled_gradients"
APPLY_METHODS = ("apply_gradients", "apply")
_NOT_OPTIMIZERS = {"schedules", "legacy", "experimental", "Optimizer", "serialize", "deserialize"}
_V1_LSO_NAMES = {
    "tensorflow.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer",
    "tensorflow.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer",
    "tensorflow.train.experimental.MixedPrecisionLossScaleOptimizer",
    "tensorflow.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite",
    "tensorflow.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite",
    "tensorflow.train.experimental.enable_mixed_precision_graph_rewrite",
}


def _is_v1_optimizer(qualified: str | None) -> bool:
    if not qualified:
        return False
    head, _, last = qualified.rpartition(".")
    return head in ("tensorflow.compat.v1.train", "tensorflow.train") and last.endswith("Optimizer") \
        and last != "Optimizer"


# --------------------------------------------------------------------------- records
@dataclass
class Statement:
    """A statement of a scope, with the compound statements around it (inside the scope)."""

    node: cst.BaseStatement = field(repr=False)
    parents: tuple[cst.BaseStatement, ...]
    conditional: bool  # under an if/else, try handler or while of this scope
    # (id of an if/try, which of its branches): two statements on different branches of one `if`
    # (or a try body and its handler) never both run in one pass.
    branch: tuple[tuple[int, int], ...] = ()


@dataclass
class Tape:
    name: str
    withs: list[cst.With] = field(default_factory=list)  # every `with` block recording on it
    persistent: bool = False


@dataclass
class GradientCall:
    call: cst.Call = field(repr=False)
    statement: Statement
    tape: str | None  # None for tf.gradients
    target: cst.BaseExpression = field(repr=False)  # the loss the gradient is taken of
    index: int = 0
    kind: str = "tape"  # tape / tf.gradients / compute_gradients (a TF1 optimizer)
    optimizer: str | None = None  # compute_gradients: the optimizer that computes them


@dataclass
class ApplyCall:
    call: cst.Call = field(repr=False)
    statement: Statement
    optimizer: str  # the optimizer expression as written: "optimizer", "self.optimizer"
    gradients: set[int] = field(default_factory=set)  # indices of GradientCalls feeding it


@dataclass
class ScaleCall:
    call: cst.Call = field(repr=False)
    statement: Statement
    method: str  # scale_loss / get_scaled_loss / get_unscaled_gradients
    optimizer: str
    conditional: bool  # inside `x if c else y` or an if-statement: user-managed
    scope: "Scope | None" = field(default=None, repr=False)


# ----------------------------------------------------------------- gradient-path records
SCALED = "scaled"  # multiplied by the loss scale (gradient of scale_loss / get_scaled_loss)
UNSCALED = "unscaled"  # plain gradients, or unscaled by get_unscaled_gradients
MANUAL = "manually-unscaled"  # divided by the optimizer's scale by hand (`g / opt.dynamic_scale`)
DIVIDED = "divided"  # unscaled once too often (or an unscaled value divided by the scale)
_AFTER_UNSCALE = {SCALED: UNSCALED, UNSCALED: DIVIDED, MANUAL: DIVIDED}
_AFTER_MANUAL = {SCALED: MANUAL, UNSCALED: DIVIDED, MANUAL: DIVIDED}

# Transforms whose result depends on the size of the gradients: on scaled gradients they act
# with a threshold (or noise scale) effectively divided by the loss scale.
CLIP_GLOBAL_NORM = "clip_by_global_norm"
CLIP_NORM = "clip_by_norm"
CLIP_VALUE = "clip_by_value"
NOISE = "noise"
CALLBACK = "callback"  # a same-file helper that runs functions its caller passed in (gradient callbacks)
SENSITIVE = frozenset({CLIP_GLOBAL_NORM, CLIP_NORM, CLIP_VALUE, "clip_by_average_norm", NOISE, "helper", CALLBACK})
# Linear transforms: the loss scale passes through them unchanged (the scale only changes inside
# apply, so accumulating scaled micro-batch gradients between two applies is fine).
ACCUMULATE = "accumulate"
ALL_REDUCE = "all_reduce"
UNSCALE = "unscale"  # get_unscaled_gradients
MANUAL_UNSCALE = "manual_unscale"

_TRANSFORM_FUNCTIONS = {
    "tensorflow.clip_by_global_norm": CLIP_GLOBAL_NORM,
    "tensorflow.clip_by_norm": CLIP_NORM,
    "tensorflow.clip_by_value": CLIP_VALUE,
    "tensorflow.clip_by_average_norm": "clip_by_average_norm",
    "tensorflow.compat.v1.clip_by_average_norm": "clip_by_average_norm",
    "tensorflow.math.clip_by_global_norm": CLIP_GLOBAL_NORM,
    "tensorflow.math.clip_by_norm": CLIP_NORM,
    "tensorflow.math.clip_by_value": CLIP_VALUE,
    "keras.ops.clip": CLIP_VALUE,
}
_ALL_REDUCE_METHODS = {"all_reduce", "allreduce", "batch_reduce_to", "reduce_to", "grouped_allreduce"}
_ACCUMULATE_METHODS = {"assign_add", "assign", "append", "extend"}
_SCALE_ATTRIBUTES = {"dynamic_scale", "loss_scale"}
_BUILTINS = frozenset(dir(builtins))
_RANDOM_PREFIXES = ("tensorflow.random.", "keras.random.", "numpy.random.", "tensorflow.compat.v1.random.")


@dataclass
class PathEvent:
    """Something that happens to gradients between their computation and an update."""

    kind: str  # CLIP_*, NOISE, ACCUMULATE, ALL_REDUCE, UNSCALE, MANUAL_UNSCALE, "helper"
    node: cst.CSTNode = field(repr=False)  # the call (or binary operation) doing it
    statement: Statement = field(repr=False)
    states: frozenset  # states of the gradients going in
    optimizer: str | None = None  # UNSCALE / MANUAL_UNSCALE: whose scale
    helper: str | None = None  # a same-module function doing it

    @property
    def sensitive(self) -> bool:
        return self.kind in SENSITIVE


@dataclass
class GradientPath:
    """What happens to one gradient computation on its way into one update."""

    events: list[PathEvent] = field(default_factory=list)  # source order
    states: frozenset = frozenset()  # the states reaching the update

    def sensitive_on(self, state: str) -> list[PathEvent]:
        return [e for e in self.events if e.sensitive and state in e.states]

    def of_kind(self, kind: str) -> list[PathEvent]:
        return [e for e in self.events if e.kind == kind]


@dataclass
class OptimizerBuild:
    """Where an optimizer (or LossScaleOptimizer) is constructed."""

    call: cst.Call = field(repr=False)
    target: str  # what it is assigned to: "optimizer", "self.opt", or "factory()" for a factory
    qualified: str  # canonical name of the constructor
    scope: "Scope" = field(repr=False)
    statement: Statement | None

    @property
    def is_lso(self) -> bool:
        return self.qualified in _LSO_NAMES

    @property
    def has_loss_scale_factor(self) -> bool:
        return any(a.keyword is not None and a.keyword.value == "loss_scale_factor" for a in self.call.args)

    @property
    def is_v1(self) -> bool:
        """A TF1 optimizer (``tf.compat.v1.train.*Optimizer``), or its mixed-precision wrapper."""
        return self.qualified in _V1_LSO_NAMES or _is_v1_optimizer(self.qualified)

    @property
    def is_v1_lso(self) -> bool:
        return self.qualified in _V1_LSO_NAMES

    def inner(self) -> cst.BaseExpression | None:
        """The wrapped optimizer expression of an LSO build."""
        return next((a.value for a in self.call.args if (a.keyword is None and not a.star)
                     or (a.keyword is not None and a.keyword.value in ("inner_optimizer", "opt", "optimizer"))), None)


@dataclass
class Scope:
    node: cst.Module | cst.FunctionDef = field(repr=False)
    name: str
    class_name: str | None
    params: list[str]
    statements: list[Statement] = field(default_factory=list, repr=False)


@dataclass
class Flow:
    """One gradient computation feeding one optimizer update."""

    scope: Scope
    gradient: GradientCall
    apply: ApplyCall
    optimizer: str
    build: OptimizerBuild | None  # where the optimizer is built, when we can see it
    compiled: bool  # the optimizer is a compiled model's: Keras wrapped it under mixed_float16
    scale: ScaleCall | None  # the call that produced the gradient's target, if any
    scale_statement: Statement | None  # the assignment of the scaled loss
    unscaled: bool  # gradients pass through get_unscaled_gradients before the update
    user_managed: bool  # isinstance(..., LossScaleOptimizer) guard or conditional scaling
    path: GradientPath = field(default_factory=GradientPath)

    @property
    def kind(self) -> str:
        """The updating optimizer: "lso" (scales: an LSO, `loss_scale_factor`, compiled), "plain", "unknown"."""
        wrapped = self.wrapped
        return "unknown" if wrapped is None else "lso" if wrapped else "plain"

    @property
    def wrapped(self) -> bool | None:
        """True: loss scaling is on for this optimizer; False: bare; None: cannot tell."""
        if self.compiled:
            return True
        if self.build is None:
            return None
        return self.build.is_lso or self.build.has_loss_scale_factor


@dataclass
class Analysis:
    scopes: list[Scope]
    flows: list[Flow]
    builds: list[OptimizerBuild]
    tapes: dict[int, dict[str, Tape]]  # id(scope.node) -> tape name -> tape
    scale_calls: list[ScaleCall]
    isinstance_guard: bool
    # `opt.minimize(loss, ...)` without a tape: gradient and update in one call (TF1 style).
    minimizes: list[tuple[Scope, ApplyCall, OptimizerBuild | None]] = field(default_factory=list)
    # Every gradient computation, whether or not an update in the same scope uses it.
    gradients: list[tuple[Scope, GradientCall]] = field(default_factory=list)
    # Updates in one function of gradients accumulated in another (through a shared object).
    cross_flows: list[Flow] = field(default_factory=list)

    def build_of(self, scope: Scope, optimizer: str) -> OptimizerBuild | None:
        """Where ``optimizer`` (as written in ``scope``) is built, when the file shows it."""
        found = [b for b in self.builds if b.target == optimizer and (b.scope is scope or b.scope.class_name
                 and b.scope.class_name == scope.class_name and optimizer.startswith("self."))]
        found = found or [b for b in self.builds if b.target == optimizer and isinstance(b.scope.node, cst.Module)]
        return found[-1] if found else None

    keras: int = 3  # the generation the file runs under (RuleContext.keras)

    def applied(self, flow: Flow) -> frozenset:
        """What the updating optimizer really applies, by Keras generation: Keras 3's LSO (and a
        `loss_scale_factor` optimizer) divides by its scale inside apply, Keras 2's does not.

        UNSCALED: right; SCALED: multiplied by the loss scale; DIVIDED: divided by it (unscaled
        twice, or a plain loss whose gradients the LSO still divides). An unknown optimizer counts as
        plain here."""
        if self.keras == 3 and flow.kind == "lso":
            mapping = {SCALED: UNSCALED, UNSCALED: DIVIDED, MANUAL: DIVIDED}
        else:
            mapping = {MANUAL: UNSCALED}
        return frozenset(mapping.get(s, s) for s in flow.path.states)

    def enclosing(self, scope: Scope) -> list[Scope]:
        """The functions ``scope`` is nested in, innermost first."""
        outer = [s for s in self.scopes if _encloses(s.node, scope.node)]  # scopes are in pre-order
        return outer[::-1]

    def inner_build(self, build: OptimizerBuild) -> cst.Call | None:
        """The constructor call of the optimizer an LSO build wraps, where it is visible."""
        inner = build.inner()
        if isinstance(inner, cst.Call):
            return inner
        name = dotted_name(inner) if inner is not None else None
        if name is None:
            return None
        before = [b for b in self.builds if b.target == name and not b.is_lso
                  and (b.scope is build.scope or isinstance(b.scope.node, cst.Module))]
        return before[-1].call if before else None

    def tape_of(self, flow: Flow) -> Tape | None:
        if flow.gradient.tape is None:
            return None
        return self.tapes.get(id(flow.scope.node), {}).get(flow.gradient.tape)


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


# --------------------------------------------------------------------------- analysis
def _analyse(context: RuleContext) -> Analysis:
    module = context.module
    resolve = context.resolve
    scopes = _scopes(module)
    builds: list[OptimizerBuild] = []
    factories: dict[str, cst.Call] = {}
    compiled_models: set[str] = set()
    isinstance_guard = False
    scale_calls: list[ScaleCall] = []
    all_tapes: dict[int, dict[str, Tape]] = {}
    flows: list[Flow] = []
    all_minimizes: list[tuple[Scope, ApplyCall, OptimizerBuild | None]] = []
    all_gradients: list[tuple[Scope, GradientCall]] = []
    helpers = _Helpers(context, scopes)
    registry = _Registry()
    shared: dict[str, dict] = {}  # values accumulated into objects other functions can read
    pending: list[tuple[Scope, list[ApplyCall]]] = []  # scopes with updates but no gradient of their own

    # Pass 1: optimizer builds, factories, compile calls, isinstance guards.
    per_scope_calls: dict[int, list[tuple[Statement, cst.Call, bool]]] = {}
    for scope in scopes:
        calls: list[tuple[Statement, cst.Call, bool]] = []
        for st in scope.statements:
            found = calls_in(st.node) if isinstance(st.node, cst.SimpleStatementLine) else _header_calls(st.node)
            calls.extend((st, c, ifexp) for c, ifexp in found)
            if isinstance(st.node, cst.SimpleStatementLine):
                for target, value in assigned_targets(st.node):
                    text = dotted_name(target)
                    if text is None or not isinstance(value, cst.Call):
                        continue
                    qualified = resolve(value.func)
                    if _is_optimizer_constructor(qualified):
                        builds.append(OptimizerBuild(value, text, qualified, scope, st))
                for small in st.node.body:
                    if isinstance(small, cst.Return) and isinstance(small.value, cst.Call) and scope.node is not module:
                        if _is_optimizer_constructor(resolve(small.value.func)):
                            factories[scope.name] = small.value
        per_scope_calls[id(scope.node)] = calls
        for st, call, _ in calls:
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "compile":
                owner = dotted_name(func.value)
                if owner is not None:
                    compiled_models.add(owner)
            if isinstance(func, cst.Name) and func.value == "isinstance" and len(call.args) == 2:
                if resolve(call.args[1].value) in _LSO_NAMES or "LossScaleOptimizer" in context.code(call.args[1].value):
                    isinstance_guard = True
    # A factory returning a name bound to a build in its own body.
    for build in list(builds):
        if build.scope.node is not module:
            for st in build.scope.statements:
                if not isinstance(st.node, cst.SimpleStatementLine):
                    continue
                for small in st.node.body:
                    if isinstance(small, cst.Return) and isinstance(small.value, cst.Name) and small.value.value == build.target:
                        factories.setdefault(build.scope.name, build.call)
    # Assignments from a factory call count as builds (the wrap goes into the factory).
    for scope in scopes:
        for st in scope.statements:
            for target, value in assigned_targets(st.node):
                text = dotted_name(target)
                if text and isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in factories:
                    inner = factories[value.func.value]
                    builds.append(OptimizerBuild(inner, text, resolve(inner.func) or "", scope, None))

    # An optimizer's own methods (`minimize` calling `self.apply_gradients`, a wrapper forwarding to
    # `self.optimizer`) implement updates; they are not training loops.
    optimizer_classes = _optimizer_classes(module)

    # Pass 2: per scope, tapes, gradient calls, applies, scaling calls, data flow.
    for scope in scopes:
        calls = per_scope_calls[id(scope.node)]
        tapes: dict[str, Tape] = {}
        # A tape handed in by the caller (`def minimize(tape, optimizer, loss, ...)`, tf-models' grad_utils).
        for param in scope.params:
            if param == "tape" or param.endswith("_tape"):
                tapes[param] = Tape(param)
        for st in scope.statements:
            if isinstance(st.node, cst.With):
                for item in st.node.items:
                    asname = item.asname.name if item.asname is not None else None
                    if isinstance(item.item, cst.Call) and _is_tape(resolve, item.item.func):
                        if isinstance(asname, cst.Name):
                            tape = tapes.setdefault(asname.value, Tape(asname.value))
                            tape.withs.append(st.node)
                            tape.persistent |= _is_true(getattr(_keyword(item.item, "persistent"), "value", None))
                    elif isinstance(item.item, cst.Name) and item.item.value in tapes:
                        tapes[item.item.value].withs.append(st.node)  # `with tape:` re-entered
            for target, value in assigned_targets(st.node):
                if isinstance(target, cst.Name) and isinstance(value, cst.Call) and _is_tape(resolve, value.func):
                    tape = tapes.setdefault(target.value, Tape(target.value))
                    tape.persistent |= _is_true(getattr(_keyword(value, "persistent"), "value", None))
        # `tape = tf.GradientTape()` then `with tape:` (the With came before we knew the name).
        for st in scope.statements:
            if isinstance(st.node, cst.With):
                for item in st.node.items:
                    if isinstance(item.item, cst.Name) and item.item.value in tapes and st.node not in tapes[item.item.value].withs:
                        tapes[item.item.value].withs.append(st.node)
        all_tapes[id(scope.node)] = tapes

        gradients: list[GradientCall] = []
        applies: list[ApplyCall] = []
        minimizes: list[ApplyCall] = []
        local_scales: list[ScaleCall] = []
        for st, call, ifexp in calls:
            func = call.func
            if call.args and resolve(func) == "tensorflow.gradients":
                gradients.append(GradientCall(call, st, None, call.args[0].value, len(all_gradients) + len(gradients),
                                              "tf.gradients"))
            elif isinstance(func, cst.Attribute):
                owner = dotted_name(func.value)
                method = func.attr.value
                if method == "gradient" and isinstance(func.value, cst.Name) and func.value.value in tapes and call.args:
                    gradients.append(GradientCall(call, st, func.value.value, call.args[0].value,
                                                  len(all_gradients) + len(gradients)))
                elif method == "compute_gradients" and owner is not None and call.args:
                    gradients.append(GradientCall(call, st, None, call.args[0].value,
                                                  len(all_gradients) + len(gradients), "compute_gradients", owner))
                elif method == "minimize" and owner is not None and call.args and _keyword(call, "tape") is None:
                    minimizes.append(ApplyCall(call, st, owner))
                elif method in APPLY_METHODS and owner is not None:
                    applies.append(ApplyCall(call, st, owner))
                elif method in SCALE_METHODS + (UNSCALE_METHOD,) and owner is not None:
                    local_scales.append(ScaleCall(call, st, method, owner, ifexp or st.conditional, scope))
        scale_calls.extend(local_scales)
        all_gradients.extend((scope, g) for g in gradients)
        if scope.class_name is not None and scope.class_name in optimizer_classes:
            continue
        for call in minimizes:
            build, _ = _trace(context, scope, scopes, call.optimizer, builds, compiled_models)
            all_minimizes.append((scope, call, build))
        if not gradients and applies:
            pending.append((scope, applies))
        if not gradients:
            continue

        # Data flow: which values carry which gradient results, in which state (two passes for loops).
        tracer = _PathTracer(context, scope, gradients, local_scales, helpers, registry)
        tracer.run()
        tracer.export(shared)
        if not applies:
            continue
        by_index = {g.index: g for g in gradients}
        paths = tracer.paths(applies)
        linked = [a for a in applies if a.gradients]
        # `.apply(...)` is a common method name: only linked calls count. An unlinked
        # apply_gradients with exactly one gradient call in the scope is taken as its update.
        if not linked:
            named = [a for a in applies if a.call.func.attr.value == "apply_gradients"]
            if len(named) == 1 and len(gradients) == 1:
                named[0].gradients = {gradients[0].index}
                linked = named
        for apply in linked:
            for index in sorted(apply.gradients):
                grad = by_index[index]
                flow = _flow(context, scope, scopes, grad, apply, builds, compiled_models,
                             local_scales, isinstance_guard)
                flow.path = paths.get((id(apply.call), index)) or GradientPath(
                    [], frozenset({SCALED if flow.scale is not None else UNSCALED}))
                flows.append(flow)

    # Gradients accumulated into a shared object (`self.accumulator`, a closure's `accum`) in one
    # function and applied in another (`forward` / `step` of gradient accumulation), or passed to a
    # same-file function that updates (`self._weight_update(grads)` splitting them between two
    # optimizers): followed too, as flows of their own (`cross_flows`), so that no fix drops an
    # unscale such an update needs.
    cross_flows: list[Flow] = []
    if shared or registry.calls_into:
        grad_of = {g.index: (s, g) for s, g in all_gradients}
        scales_of: dict[int, list[ScaleCall]] = {}
        for s in scale_calls:
            if s.scope is not None:
                scales_of.setdefault(id(s.scope.node), []).append(s)
        for scope, applies in pending:
            start = dict(shared)
            for bound in registry.calls_into.get(id(scope.node), ()):
                for name, value in bound.items():
                    start[name] = _merge(start.get(name, {}), value)
            if not start:
                continue
            tracer = _PathTracer(context, scope, [], [], helpers, registry, start)
            tracer.run()
            paths = tracer.paths(applies)
            for apply in applies:
                for index in sorted(apply.gradients):
                    grad_scope, grad = grad_of[index]
                    flow = _flow(context, scope, scopes, grad, apply, builds, compiled_models,
                                 scales_of.get(id(grad_scope.node), []), isinstance_guard)
                    flow.scale, flow.scale_statement = _scale_of(grad_scope, grad.target, grad.statement,
                                                                 scales_of.get(id(grad_scope.node), []))
                    flow.path = paths[(id(apply.call), index)]
                    cross_flows.append(flow)
    return Analysis(scopes, flows, builds, all_tapes, scale_calls, isinstance_guard, all_minimizes, all_gradients,
                    cross_flows, context.keras)


def _scale_of(scope: Scope, target: cst.BaseExpression, before: Statement,
              scales: list[ScaleCall]) -> tuple[ScaleCall | None, Statement | None]:
    """The scaling call whose result is ``target`` (a name assigned from it, or the call itself)."""
    if isinstance(target, cst.Call):
        for s in scales:
            if s.call is target:
                return s, None
        return None, None
    if not isinstance(target, cst.Name):
        return None, None
    found: tuple[ScaleCall | None, Statement | None] = (None, None)
    for st in scope.statements:
        if st is before:
            break
        for t, value in assigned_targets(st.node):
            if target.value not in target_names(t) or value is None:
                continue
            inner = [s for s in scales if s.statement is st and s.method in SCALE_METHODS]
            if inner:
                found = (inner[0], st)
            elif found[0] is not None and (
                    any(isinstance(small, cst.AugAssign) for small in st.node.body)
                    or target.value in names_in(value)):
                pass  # `scaled += term` / `scaled = scaled + term`: still scaled (MP105 reports the term)
            else:
                found = (None, None)  # rebound to something unscaled
    return found


def _flow(context, scope, scopes, grad, apply, builds, compiled_models, scales, guard) -> Flow:
    optimizer = apply.optimizer
    build, compiled = _trace(context, scope, scopes, optimizer, builds, compiled_models)
    scale, scale_st = _scale_of(scope, grad.target, grad.statement, scales)
    unscaled = any(s.method == UNSCALE_METHOD and s.optimizer == optimizer for s in scales)
    user_managed = guard or any(s.conditional for s in scales if s.optimizer == optimizer)
    return Flow(scope, grad, apply, optimizer, build, compiled, scale, scale_st, unscaled, user_managed)


def _trace(context, scope: Scope, scopes: list[Scope], optimizer: str, builds: list[OptimizerBuild],
           compiled_models: set[str], depth: int = 0) -> tuple[OptimizerBuild | None, bool]:
    """Where ``optimizer`` (as written in ``scope``) is built; second value: compile wrapped it."""
    module = context.module
    head, _, attr = optimizer.partition(".")
    if head == "self" and scope.class_name is not None:
        matches = [b for b in builds if b.target == optimizer and b.scope.class_name == scope.class_name]
        if matches:
            return matches[-1], False
        # Keras sets self.optimizer in compile(); under mixed_float16 it is a LossScaleOptimizer.
        return None, optimizer == "self.optimizer" and bool(compiled_models or scope.name == "train_step")
    if attr == "optimizer" and head in compiled_models:
        return None, True
    local = [b for b in builds if b.target == optimizer and b.scope is scope]
    if local:
        return local[-1], False
    if head in scope.params and depth == 0:
        return _trace_argument(context, scope, scopes, optimizer, builds, compiled_models)
    glob = [b for b in builds if b.target == optimizer and b.scope.node is module]
    if glob:
        return glob[-1], False
    # A name bound in an enclosing function (closures: `def train_step` inside `main`).
    enclosing = [b for b in builds if b.target == optimizer and b.scope.node is not module
                 and _encloses(b.scope.node, scope.node)]
    if enclosing:
        return enclosing[-1], False
    return None, False


def _encloses(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    return outer is not inner and isinstance(outer, cst.FunctionDef) and contains(outer.body, inner)


def _trace_argument(context, scope, scopes, optimizer, builds, compiled_models):
    """Follow a parameter to the arguments of the step function's call sites (one level)."""
    index = scope.params.index(optimizer.split(".")[0])
    if scope.class_name is not None and scope.params and scope.params[0] == "self":
        index -= 1
    results = []
    for caller in scopes:
        for st in caller.statements:
            for call, _ in (calls_in(st.node) if isinstance(st.node, cst.SimpleStatementLine) else _header_calls(st.node)):
                func = call.func
                name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
                if name != scope.name:
                    continue
                arg = _keyword(call, optimizer) or next(
                    (a for i, a in enumerate(x for x in call.args if x.keyword is None) if i == index), None)
                if arg is not None and isinstance(arg.value, cst.Call) \
                        and _is_optimizer_constructor(context.resolve(arg.value.func)):
                    # Built right in the call: `train(model, keras.optimizers.Adam(), data)`.
                    results.append((OptimizerBuild(arg.value, optimizer, context.resolve(arg.value.func),
                                                   caller, st), False))
                    continue
                text = dotted_name(arg.value) if arg is not None else None
                if text is None:
                    return None, False
                results.append(_trace(context, caller, scopes, text, builds, compiled_models, depth=1))
    def same(a, b) -> bool:
        if a[1] != b[1]:
            return False
        return a[0] is b[0] or (a[0] is not None and b[0] is not None and a[0].call is b[0].call)

    if results and all(same(r, results[0]) for r in results):
        return results[0]
    return None, False


# --------------------------------------------------------------------------- the gradient path
# A value is {gradient index: (states, event ids)}: which gradient computations it carries, in
# which states (SCALED/UNSCALED/MANUAL), and what has happened to them on the way.
_Value = dict


def _merge(*values: dict) -> dict:
    out: dict = {}
    for value in values:
        for index, (states, events) in value.items():
            if index in out:
                old = out[index]
                out[index] = (old[0] | states, old[1] | events)
            else:
                out[index] = (states, events)
    return out


def _root_key(node: cst.BaseExpression) -> str | None:
    """The variable a subscript or method receiver belongs to: ``accum[i]`` -> ``accum``."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return dotted_name(node)


class _Helpers:
    """Functions of this module that gradients are passed to: what each does to them."""

    def __init__(self, context: RuleContext, scopes: list[Scope]) -> None:
        self.context = context
        self.functions: dict[tuple[str | None, str], Scope] = {}
        for scope in scopes:
            if isinstance(scope.node, cst.FunctionDef) and scope.params:
                self.functions.setdefault((scope.class_name, scope.name), scope)
        self._summaries: dict[int, tuple[bool, bool]] = {}

    def lookup(self, func: cst.BaseExpression, caller: Scope) -> Scope | None:
        if isinstance(func, cst.Name):
            return self.functions.get((None, func.value))
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self" \
                and caller.class_name is not None:
            return self.functions.get((caller.class_name, func.attr.value))
        return None

    def summary(self, scope: Scope) -> tuple[str | None, bool, bool]:
        """(what size-sensitive thing the helper does: "helper" (clips or adds noise), "callback"
        (calls a function it was given, e.g. a list of gradient callbacks), or None; whether it unscales;
        whether it all-reduces)."""
        found = self._summaries.get(id(scope.node))
        if found is None:
            sensitive: str | None = None
            unscales = reduces = False
            resolve = self.context.resolve
            # Names bound to what the caller passed: parameters and `for f in callbacks` targets.
            given = set(scope.params)
            for node in walk(scope.node.body):
                if type(node) is cst.For and names_in(node.iter) & given:
                    given |= target_names(node.target)
            for node in walk(scope.node.body):
                kind = type(node)
                if kind is cst.Call:
                    if resolve(node.func) in _TRANSFORM_FUNCTIONS:
                        sensitive = "helper"
                    elif isinstance(node.func, cst.Attribute) and node.func.attr.value == UNSCALE_METHOD:
                        unscales = True
                    elif isinstance(node.func, cst.Attribute) and (
                            node.func.attr.value in _ALL_REDUCE_METHODS or "all_reduce" in node.func.attr.value):
                        reduces = True
                    elif isinstance(node.func, cst.Name) and node.func.value in given and node.args \
                            and sensitive is None:
                        sensitive = CALLBACK
                elif kind is cst.BinaryOperation and isinstance(node.operator, cst.Add) and (
                        _has_random(self.context, node.left) or _has_random(self.context, node.right)):
                    sensitive = "helper"
            found = self._summaries[id(scope.node)] = (sensitive, unscales, reduces)
        return found


def _has_random(context: RuleContext, expr: cst.CSTNode) -> bool:
    for call, _ in calls_in(expr):
        qualified = context.resolve(call.func) or ""
        if qualified.startswith(_RANDOM_PREFIXES):
            return True
    return False


def _scale_read(expr: cst.BaseExpression) -> str | None:
    """``opt.dynamic_scale`` / ``opt.loss_scale`` / ``opt.loss_scale()`` / ``loss_scale`` / a cast of one:
    the optimizer (or "") whose current loss scale ``expr`` reads, else None."""
    if isinstance(expr, cst.Attribute) and expr.attr.value in _SCALE_ATTRIBUTES:
        return dotted_name(expr.value) or ""
    if isinstance(expr, cst.Name) and expr.value in ("loss_scale", "dynamic_scale", "current_loss_scale"):
        return ""
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "loss_scale" and not expr.args:
            return dotted_name(expr.func.value) or ""
        if expr.args and isinstance(expr.func, (cst.Name, cst.Attribute)) and \
                (dotted_name(expr.func) or "").rpartition(".")[2] == "cast":
            return _scale_read(expr.args[0].value)
    return None


class _Registry:
    """The events of every scope of a file (event ids are shared, so values can cross scopes)."""

    def __init__(self) -> None:
        self.events: dict[int, PathEvent] = {}
        self.ids: dict[tuple[int, str], int] = {}
        self.sequence: dict[int, int] = {}
        # Gradients passed into a same-file function: its node id -> [{parameter: value}]
        self.calls_into: dict[int, list[dict[str, dict]]] = {}


class _PathTracer:
    """Follows gradient values through one scope, statement by statement (two passes for loops)."""

    def __init__(self, context: RuleContext, scope: Scope, gradients: list[GradientCall],
                 scales: list[ScaleCall], helpers: _Helpers, registry: _Registry,
                 taint: dict[str, dict] | None = None) -> None:
        self.context = context
        self.scope = scope
        self.helpers = helpers
        # key -> [(branch of the binding statement, value, whether it replaces what came before)]
        self.taint: dict[str, list] = {key: [((), value, False)] for key, value in (taint or {}).items()}
        self.registry = registry
        self.events = registry.events
        self._event_ids = registry.ids
        self._sequence = registry.sequence
        self._accumulated: set[str] = set()  # keys values were accumulated into
        self.apply_values: dict[int, dict] = {}
        self.by_call: dict[int, tuple[int, frozenset]] = {}
        for g in gradients:
            scale, _ = _scale_of(scope, g.target, g.statement, scales)
            state = SCALED if scale is not None and scale.method in SCALE_METHODS else UNSCALED
            self.by_call[id(g.call)] = (g.index, frozenset({state}))
        self._position = {id(st.node): i for i, st in enumerate(scope.statements)}
        self.statement: Statement | None = None

    def order(self, event: PathEvent) -> tuple[int, int]:
        # Events of another scope (a value accumulated elsewhere) come first.
        return self._position.get(id(event.statement.node), -1), self._sequence[id(event)]

    def paths(self, applies: list[ApplyCall]) -> dict[tuple[int, int], GradientPath]:
        """The path of each gradient computation into each update of this scope (sets apply.gradients)."""
        out: dict[tuple[int, int], GradientPath] = {}
        for apply in applies:
            value = self.apply_values.get(id(apply.call), {})
            apply.gradients = set(value)
            for index, (states, events) in value.items():
                ordered = sorted((self.events[e] for e in events), key=self.order)
                out[(id(apply.call), index)] = GradientPath(ordered, states)
        return out

    def export(self, shared: dict[str, dict]) -> None:
        """Put the values accumulated into objects other functions can see (``self.x``, a closure's
        or module's object: not a name this function binds) where those functions will look."""
        local = set(self.scope.params)
        for st in self.scope.statements:
            for target, _ in assigned_targets(st.node):
                local |= target_names(target)
        for key in self._accumulated:
            root = key.partition(".")[0]
            if (root == "self" and "." in key) or (root != "self" and root not in local):
                shared[key] = _merge(shared.get(key, {}), *(v for _, v, _ in self.taint.get(key, ())))

    # -- events ---------------------------------------------------------------------
    def _event(self, kind: str, node: cst.CSTNode, value: dict, optimizer: str | None = None,
               helper: str | None = None, state: frozenset | None = None) -> dict:
        """Record ``kind`` happening to ``value`` at ``node``; the value after it."""
        states = frozenset().union(*(s for s, _ in value.values())) if value else frozenset()
        key = (id(node), kind)
        eid = self._event_ids.get(key)
        if eid is None:
            event = PathEvent(kind, node, self.statement, states, optimizer, helper)
            eid = self._event_ids[key] = len(self.events)
            self.events[eid] = event
            self._sequence[id(event)] = eid
        else:
            event = self.events[eid]
            event.states = event.states | states
        if isinstance(state, dict):  # each state maps to what the event makes of it
            return {i: (frozenset(state.get(x, x) for x in s), e | {eid}) for i, (s, e) in value.items()}
        return {i: (state if state is not None else s, e | {eid}) for i, (s, e) in value.items()}

    # -- statements -----------------------------------------------------------------
    def run(self) -> None:
        statements = self.scope.statements
        for st in statements:
            self.statement = st
            self._statement(st)
        # A second pass over loop bodies only: what one iteration leaves reaches the next
        # (accumulators); straight-line code must not see its own later bindings.
        for st in statements:
            if any(type(parent) is cst.For or type(parent) is cst.While for parent in st.parents):
                self.statement = st
                self._statement(st)

    def _statement(self, st: Statement) -> None:
        node = st.node
        strong = True  # an assignment replaces the value on its branch (`_store`)
        if isinstance(node, cst.For):
            self._bind(node.target, self.eval(node.iter, {}), False)
            return
        if isinstance(node, cst.With):
            for item in node.items:
                self.eval(item.item, {})
            return
        if isinstance(node, (cst.If, cst.While)):
            self.eval(node.test, {})
            return
        if not isinstance(node, cst.SimpleStatementLine):
            return
        for small in node.body:
            kind = type(small)
            if kind is cst.Assign:
                value = self.eval(small.value, {})
                for target in small.targets:
                    self._bind(target.target, value, strong)
            elif kind is cst.AugAssign:
                value = self.eval(small.value, {})
                if value:
                    value = self._event(ACCUMULATE, small, value) if isinstance(small.operator, cst.AddAssign) \
                        else value
                self._bind(small.target, value, False)
            elif kind is cst.AnnAssign and small.value is not None:
                self._bind(small.target, self.eval(small.value, {}), strong)
            elif kind is cst.Expr:
                value = self.eval(small.value, {})
                if type(small.value) is cst.Call:
                    self._into_object(small.value)
            elif kind is cst.Return and small.value is not None:
                self.eval(small.value, {})

    def _bind(self, target: cst.BaseExpression, value: dict, strong: bool) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, value, strong)
            return
        if isinstance(target, cst.StarredElement):
            self._bind(target.value, value, strong)
            return
        if isinstance(target, cst.Subscript):
            key, strong = _root_key(target), False
        else:
            key = dotted_name(target)
        if key is None:
            return
        self._store(key, value, strong)

    def _store(self, key: str, value: dict, kills: bool) -> None:
        """Bind ``key`` at the current statement: an assignment replaces what reached it on this branch."""
        branch = self.statement.branch if self.statement is not None else ()
        entries = self.taint.get(key)
        if kills and not branch:
            if value:
                self.taint[key] = [((), value, True)]
            else:
                self.taint.pop(key, None)
            return
        if entries is None:
            if not value and kills:
                return
            entries = self.taint[key] = []
        elif kills:
            # Every path through this statement rebinds the key: what was bound on this branch (or
            # deeper inside it) before is dead everywhere.
            entries[:] = [e for e in entries if e[0][:len(branch)] != branch]
        entries.append((branch, value, kills))

    def _lookup(self, key: str) -> dict | None:
        """What reaches a read of ``key`` here: bindings on other branches of an `if` do not."""
        entries = self.taint.get(key)
        if entries is None:
            return None
        reader = self.statement.branch if self.statement is not None else ()
        mine = dict(reader)
        found: list[dict] = []
        for branch, value, kills in reversed(entries):
            if any(k in mine and mine[k] != which for k, which in branch):
                continue
            found.append(value)
            if kills and reader[:len(branch)] == branch:
                break
        return _merge(*found)

    # -- expressions ----------------------------------------------------------------
    def eval(self, expr: cst.CSTNode, overlay: dict) -> dict:
        kind = type(expr)
        if kind is cst.Name:
            name = expr.value
            return overlay[name] if name in overlay else (self._lookup(name) or {})
        if kind is cst.Attribute:
            dotted = dotted_name(expr)
            if dotted is not None:
                head = dotted.partition(".")[0]
                if head in overlay:
                    return overlay[head]
                # `accumulator.gradients` after `accumulator(grads)` / `accumulator.add(grads)`.
                while dotted:
                    found = self._lookup(dotted)
                    if found is not None:
                        return found
                    dotted = dotted.rpartition(".")[0]
                    if dotted == "self":
                        break
                return {}
            return self.eval(expr.value, overlay)
        if kind is cst.Call:
            return self._call(expr, overlay)
        if kind is cst.BinaryOperation:
            return self._binary(expr, overlay)
        if kind in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
            return self._comprehension(expr, overlay)
        if kind is cst.Lambda or kind is cst.FunctionDef:
            return {}
        if kind is cst.Subscript:
            for element in expr.slice:
                self.eval(element, overlay)
            return self.eval(expr.value, overlay)
        return _merge(*(self.eval(child, overlay) for child in children(expr)))

    def _args(self, call: cst.Call, overlay: dict) -> dict:
        return _merge(*(self.eval(arg.value, overlay) for arg in call.args))

    def _call(self, call: cst.Call, overlay: dict) -> dict:
        func = call.func
        found = self.by_call.get(id(call))
        if found is not None:
            self._args(call, overlay)
            return {found[0]: (found[1], frozenset())}
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            owner = dotted_name(func.value)
            if method == UNSCALE_METHOD:
                value = self._args(call, overlay)
                return self._event(UNSCALE, call, value, owner, state=_AFTER_UNSCALE) if value else {}
            if method in APPLY_METHODS:
                value = self._args(call, overlay)
                if value:
                    self.apply_values[id(call)] = _merge(self.apply_values.get(id(call), {}), value)
                return {}
            if method in _ALL_REDUCE_METHODS:
                value = self._args(call, overlay)
                return self._event(ALL_REDUCE, call, value) if value else {}
            if method in _ACCUMULATE_METHODS:
                value = self._args(call, overlay)
                if value:
                    value = self._event(ACCUMULATE, call, value)
                    self._accumulate(_root_key(func.value), value)
                return value
        qualified = self.context.resolve(func)
        transform = _TRANSFORM_FUNCTIONS.get(qualified) if qualified else None
        if transform is not None:
            value = self._args(call, overlay)
            return self._event(transform, call, value) if value else {}
        helper = self.helpers.lookup(func, self.scope)
        if helper is not None and helper is not self.scope:
            values = [self.eval(arg.value, overlay) for arg in call.args]
            value = _merge(*values)
            if not value:
                return {}
            self._passed(helper, func, call, values)
            sensitive, unscales, reduces = self.helpers.summary(helper)
            if reduces:
                value = self._event(ALL_REDUCE, call, value, helper=helper.name)
            if sensitive:
                value = self._event(sensitive, call, value, helper=helper.name)
            if unscales:
                value = self._event(UNSCALE, call, value, helper=helper.name, state=_AFTER_UNSCALE)
            return value
        if isinstance(func, cst.Name) and func.value == "zip" and len(call.args) >= 2 and not call.args[0].star:
            # zip(grads, variables): the gradients are the first; variables unpacked next to gradients
            # (`grads, variables = helper(...)`) must not make the update look fed twice.
            values = [self.eval(arg.value, overlay) for arg in call.args]
            first = dict(values[0])
            for other in values[1:]:
                for index, entry in other.items():
                    first.setdefault(index, entry)  # another computation's values (SAM's perturbation)
            return first
        receiver = self.eval(func.value, overlay) if isinstance(func, cst.Attribute) else {}
        return _merge(receiver, self._args(call, overlay))

    def _into_object(self, call: cst.Call) -> None:
        """``accumulator(grads)`` / ``accum.add_gradients(grads)`` as a statement: the object keeps them."""
        func = call.func
        if self.context.resolve(func) is not None or self.helpers.lookup(func, self.scope) is not None:
            return
        if isinstance(func, cst.Name):
            if func.value in _BUILTINS:
                return
            key = func.value
        elif isinstance(func, cst.Attribute):
            if func.attr.value in APPLY_METHODS or func.attr.value in _ACCUMULATE_METHODS \
                    or func.attr.value in ("minimize", UNSCALE_METHOD):
                return
            key = _root_key(func.value)
        else:
            return
        value = self._args(call, {})
        if value and key is not None:
            self._accumulate(key, self._event(ACCUMULATE, call, value))

    def _passed(self, helper: Scope, func: cst.BaseExpression, call: cst.Call, values: list[dict]) -> None:
        """Remember which parameters of ``helper`` get gradients, for following them inside it."""
        params = list(helper.params)
        if isinstance(func, cst.Attribute) and params[:1] == ["self"]:
            params = params[1:]
        bound: dict[str, dict] = {}
        positional = 0
        for arg, value in zip(call.args, values):
            if arg.star or not value:
                positional += arg.keyword is None
                continue
            if arg.keyword is not None:
                name = arg.keyword.value
            elif positional < len(params):
                name = params[positional]
            else:
                name = None
            positional += arg.keyword is None
            if name is not None:
                bound[name] = value
        if bound:
            self.registry.calls_into.setdefault(id(helper.node), []).append(bound)

    def _accumulate(self, key: str | None, value: dict) -> None:
        if key is not None:
            self._store(key, value, False)
            self._accumulated.add(key)

    def _binary(self, node: cst.BinaryOperation, overlay: dict) -> dict:
        left = self.eval(node.left, overlay)
        right = self.eval(node.right, overlay)
        operator = type(node.operator)
        if operator is cst.Divide and left and not right:
            owner = _scale_read(node.right)
            if owner is not None:
                return self._event(MANUAL_UNSCALE, node, left, owner or None, state=_AFTER_MANUAL)
        if operator in (cst.Add, cst.Subtract) and (left or right):
            # `g + tf.random.normal(tf.shape(g), stddev=s)`: the noise side may read g's shape.
            for value, other in ((left, node.right), (right, node.left)):
                if value and isinstance(other, cst.Call) and _has_random(self.context, other):
                    return self._event(NOISE, node, value)
        return _merge(left, right)

    def _comprehension(self, node, overlay: dict) -> dict:
        inner = dict(overlay)
        for_in = node.for_in
        while for_in is not None:
            value = self.eval(for_in.iter, inner)
            for name in target_names(for_in.target):
                inner[name] = value
            for condition in for_in.ifs:
                self.eval(condition.test, inner)
            for_in = for_in.inner_for_in
        if isinstance(node, cst.DictComp):
            return _merge(self.eval(node.key, inner), self.eval(node.value, inner))
        return self.eval(node.elt, inner)


def training_steps(context: RuleContext) -> Analysis:
    """The training-step analysis of ``context``'s module, computed once per file."""
    analysis = context.cache.get("training_steps")
    if analysis is None:
        analysis = context.cache["training_steps"] = _analyse(context)
    return analysis


def in_tape(analysis: Analysis, flow: Flow, statement: Statement) -> bool:
    """True if ``statement`` runs while the flow's tape records (inside one of its `with` blocks)."""
    tape = analysis.tape_of(flow)
    if tape is None:
        return flow.gradient.tape is None  # tf.gradients: graph mode, nothing to record
    return any(w in statement.parents for w in tape.withs)
