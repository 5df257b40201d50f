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


# --------------------------------------------------------------------------- records
@dataclass
class Statement:
    """A statement of a scope, with the compound statements around it (inside the scope)."""

    node: cst.BaseStatement = field(repr=False)
    parents: tuple[cst.BaseStatement, ...]
    conditional: bool  # under an if/else, try handler or while of this scope


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
    if qualified in _LSO_NAMES:
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
def _walk(body, parents: tuple, conditional: bool, scope: Scope, scopes: list[Scope], class_name: str | None) -> None:
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
        scope.statements.append(Statement(stmt, parents, conditional))
        if isinstance(stmt, cst.SimpleStatementLine):
            continue
        inner_parents = parents + (stmt,)
        branchy = isinstance(stmt, (cst.If, cst.Try, cst.While)) or conditional
        body_node = getattr(stmt, "body", None)
        if isinstance(body_node, cst.IndentedBlock):
            _walk(body_node.body, inner_parents, branchy, scope, scopes, class_name)
        elif isinstance(body_node, cst.SimpleStatementSuite):
            scope.statements.append(Statement(cst.SimpleStatementLine(body=body_node.body), inner_parents, branchy))
        orelse = getattr(stmt, "orelse", None)
        if isinstance(orelse, cst.If):
            _walk([orelse], inner_parents, True, scope, scopes, class_name)
        elif orelse is not None and isinstance(orelse.body, cst.IndentedBlock):
            _walk(orelse.body.body, inner_parents, True, scope, scopes, class_name)
        for handler in getattr(stmt, "handlers", ()) or ():
            if isinstance(handler.body, cst.IndentedBlock):
                _walk(handler.body.body, inner_parents + (handler,), True, scope, scopes, class_name)
        final = getattr(stmt, "finalbody", None)
        if final is not None and isinstance(final.body, cst.IndentedBlock):
            _walk(final.body.body, inner_parents, branchy, scope, scopes, class_name)


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

    # Pass 2: per scope, tapes, gradient calls, applies, scaling calls, data flow.
    for scope in scopes:
        calls = per_scope_calls[id(scope.node)]
        tapes: dict[str, Tape] = {}
        for st in scope.statements:
            if isinstance(st.node, cst.With):
                for item in st.node.items:
                    asname = item.asname.name if item.asname is not None else None
                    if isinstance(item.item, cst.Call) and resolve(item.item.func) == "tensorflow.GradientTape":
                        if isinstance(asname, cst.Name):
                            tape = tapes.setdefault(asname.value, Tape(asname.value))
                            tape.withs.append(st.node)
                            tape.persistent |= _is_true(getattr(_keyword(item.item, "persistent"), "value", None))
                    elif isinstance(item.item, cst.Name) and item.item.value in tapes:
                        tapes[item.item.value].withs.append(st.node)  # `with tape:` re-entered
            for target, value in assigned_targets(st.node):
                if isinstance(target, cst.Name) and isinstance(value, cst.Call) and resolve(value.func) == "tensorflow.GradientTape":
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
        local_scales: list[ScaleCall] = []
        for st, call, ifexp in calls:
            func = call.func
            if call.args and resolve(func) == "tensorflow.gradients":
                gradients.append(GradientCall(call, st, None, call.args[0].value, len(gradients)))
            elif isinstance(func, cst.Attribute):
                owner = dotted_name(func.value)
                method = func.attr.value
                if method == "gradient" and isinstance(func.value, cst.Name) and func.value.value in tapes and call.args:
                    gradients.append(GradientCall(call, st, func.value.value, call.args[0].value, len(gradients)))
                elif method in APPLY_METHODS and owner is not None:
                    applies.append(ApplyCall(call, st, owner))
                elif method in SCALE_METHODS + (UNSCALE_METHOD,) and owner is not None:
                    local_scales.append(ScaleCall(call, st, method, owner, ifexp or st.conditional))
        scale_calls.extend(local_scales)
        if not gradients or not applies:
            continue

        # Data flow: which names carry which gradient results (two passes for loops).
        taint: dict[str, set[int]] = {}
        by_call = {id(g.call): g.index for g in gradients}

        def sources(expr: cst.CSTNode) -> set[int]:
            found: set[int] = set()
            for c, _ in calls_in(expr):
                if id(c) in by_call:
                    found.add(by_call[id(c)])
            for n in names_in(expr):
                found |= taint.get(n, set())
            return found

        for _ in range(2):
            for st in scope.statements:
                if isinstance(st.node, cst.For):
                    src = sources(st.node.iter)
                    for n in target_names(st.node.target):
                        if src:
                            taint.setdefault(n, set()).update(src)
                for target, value in assigned_targets(st.node):
                    if value is None:
                        continue
                    src = sources(value)
                    if src:
                        for n in target_names(target):
                            taint.setdefault(n, set()).update(src)
        for apply in applies:
            apply.gradients = set()
            for arg in apply.call.args:
                apply.gradients |= sources(arg.value)
        linked = [a for a in applies if a.gradients]
        # `.apply(...)` is a common method name: only linked calls count. An unlinked
        # apply_gradients with exactly one gradient call in the scope is taken as its update.
        if not linked:
            named = [a for a in applies if a.call.func.attr.value == "apply_gradients"]
            if len(named) == 1 and len(gradients) == 1:
                named[0].gradients = {0}
                linked = named
        for apply in linked:
            for index in sorted(apply.gradients):
                grad = gradients[index]
                flows.append(_flow(context, scope, scopes, grad, apply, builds, compiled_models,
                                   local_scales, isinstance_guard))
    return Analysis(scopes, flows, builds, all_tapes, scale_calls, isinstance_guard)


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
