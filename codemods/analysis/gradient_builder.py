"""Builds the training-step model of one file (``Analysis``): optimizer builds and factories, tapes,
gradient and apply calls per scope, their flows (traced by ``gradient_tracer``), and the flows
across functions and objects."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.gradient_records import (
    FileView, GradientKind, APPLY_METHODS, Analysis, ApplyCall, Flow, GradientCall, GradientPath, OptimizerBuild, SCALED,
    SCALE_METHODS, ScaleCall, Scope, Statement, Tape, UNSCALED, UNSCALE_METHOD,
)
from mpfix.codemods.analysis.gradient_records import LSO_INNER_ATTRIBUTE, _LSO_NAMES, _encloses
from mpfix.codemods.analysis.gradient_syntax import (
    _header_calls, _is_optimizer_constructor, _is_tape, _is_true, _keyword, _optimizer_classes, _scopes,
    assigned_targets, calls_in, returned_tapes, tape_from_call,
)
from mpfix.codemods.analysis.gradient_tracer import _PathTracer
from mpfix.codemods.analysis.gradient_values import _Helpers, _Registry, _merge, _scale_of, _scale_read
from mpfix.codemods.facts.keras_layers import TAPE_GRADIENT_METHODS
from mpfix.codemods.names import dotted_name


# --------------------------------------------------------------------------- analysis
def _returns_name(node, name: str) -> bool:
    """Whether a statement line returns the bare name ``name``."""
    return isinstance(node, cst.SimpleStatementLine) and any(
        isinstance(s, cst.Return) and isinstance(s.value, cst.Name) and s.value.value == name for s in node.body)


def _analyse(context: FileView) -> Analysis:
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
    # A factory returning a name bound to a build in its own body returns that name's last build
    # (`opt = SGD(); opt = LossScaleOptimizer(opt); return opt`: the LSO). When its builds disagree on loss
    # scaling and one is conditional (`if mixed: opt = LossScaleOptimizer(opt)`), it may return either: unknown.
    for build in list(builds):
        if build.scope.node is not module:
            for st in build.scope.statements:
                if not isinstance(st.node, cst.SimpleStatementLine):
                    continue
                for small in st.node.body:
                    if isinstance(small, cst.Return) and isinstance(small.value, cst.Name) and small.value.value == build.target:
                        named = [b for b in builds if b.scope is build.scope and b.target == build.target]
                        # Which build a return gives depends on the path: a conditional build, or a return
                        # before the last build (`if not mixed: return opt` between SGD() and the LSO).
                        returns = [r for r in build.scope.statements if _returns_name(r.node, build.target)]
                        if len({b.is_lso or b.has_loss_scale_factor for b in named}) > 1 \
                                and (any(b.statement is None or b.statement.conditional for b in named)
                                     or len(returns) > 1 or any(r.conditional for r in returns)):
                            continue
                        factories.setdefault(build.scope.name, named[-1].call)
    # Assignments from a factory call count as builds (the wrap goes into the factory).
    for scope in scopes:
        for st in scope.statements:
            for target, value in assigned_targets(st.node):
                text = dotted_name(target)
                if text and isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in factories:
                    inner = factories[value.func.value]
                    builds.append(OptimizerBuild(inner, text, resolve(inner.func) or "", scope, None, st, value))

    # A fixed scale given as `loss_scale_factor=LOSS_SCALE`: that expression is the optimizer's scale.
    for build in builds:
        if build.statement is not None and (factor := build.scale_factor()) is not None:
            registry.scale_factors.setdefault(context.code(factor), (build.target, id(build.scope.node)))

    # An optimizer's own methods (`minimize` calling `self.apply_gradients`, a wrapper forwarding to
    # `self.optimizer`) implement updates; they are not training loops.
    optimizer_classes = _optimizer_classes(module)

    # Pass 2: per scope, tapes, gradient calls, applies, scaling calls, data flow.
    tapes_returned = returned_tapes(module, resolve)
    for scope in scopes:
        calls = per_scope_calls[id(scope.node)]
        tapes: dict[str, Tape] = {}
        closed: set[str] = set()
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
                returned = tape_from_call(target, value, tapes_returned)
                if returned is not None:  # a tape another function's block recorded on: closed, no `with` here
                    tapes.setdefault(returned, Tape(returned))
                    closed.add(returned)
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
                                              GradientKind.TF_GRADIENTS))
            elif isinstance(func, cst.Attribute):
                owner = dotted_name(func.value)
                method = func.attr.value
                if method in TAPE_GRADIENT_METHODS and isinstance(func.value, cst.Name) and func.value.value in tapes and call.args:
                    gradients.append(GradientCall(call, st, func.value.value, call.args[0].value,
                                                  len(all_gradients) + len(gradients)))
                elif method == "compute_gradients" and owner is not None and call.args:
                    gradients.append(GradientCall(call, st, None, call.args[0].value,
                                                  len(all_gradients) + len(gradients), GradientKind.COMPUTE_GRADIENTS, owner))
                elif method == "minimize" and owner is not None and call.args and _keyword(call, "tape") is None:
                    minimizes.append(ApplyCall(call, st, owner))
                elif method in APPLY_METHODS and owner is not None:
                    applies.append(ApplyCall(call, st, owner))
                elif method in SCALE_METHODS + (UNSCALE_METHOD,) and owner is not None and _scale_read(call) is None:
                    # (`opt.scale_loss(1.0)` reads the scale: it scales no loss)
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
                grad = by_index.get(index)
                if grad is None:
                    continue  # returned by a helper traced earlier: one path per scope
                flow = _flow(context, scope, scopes, grad, apply, builds, compiled_models,
                             local_scales, isinstance_guard, helpers)
                if grad.tape in closed and flow.scale is None:
                    flow.user_managed = True  # the loss comes with the tape: its scaling happened out of sight
                flow.path = paths.get((id(apply.call), index)) or GradientPath(
                    [], frozenset({SCALED if flow.scale is not None else UNSCALED}))
                flows.append(flow)

    # Gradients accumulated into a shared object (`self.accumulator`, a closure's `accum`) in one
    # function and applied in another (`forward` / `step` of gradient accumulation), or passed to a
    # same-file function that updates (`self._weight_update(grads)` splitting them between two
    # optimizers): followed too, as flows of their own (`cross_flows`), so that no fix drops an
    # unscale such an update needs.
    cross_flows: list[Flow] = []
    # Same-file functions and methods that were handed gradients but neither take nor apply any
    # (`self.accumulator.add(grads)`): what they keep in their object (`self.sums`) is shared too.
    traced = {id(s.node) for s, _ in all_gradients} | {id(s.node) for s, _ in pending}
    for scope in scopes:
        bound = registry.calls_into.get(id(scope.node))
        if not bound or id(scope.node) in traced:
            continue
        start: dict[str, dict] = {}
        for values in bound:
            for name, value in values.items():
                start[name] = _merge(start.get(name, {}), value)
        tracer = _PathTracer(context, scope, [], [], helpers, registry, start)
        tracer.run()
        tracer.export(shared)
    if shared or registry.calls_into or registry.returns:
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
            if not start and not registry.returns:
                continue
            tracer = _PathTracer(context, scope, [], [], helpers, registry, start)
            tracer.run()
            paths = tracer.paths(applies)
            for apply in applies:
                for index in sorted(apply.gradients):
                    grad_scope, grad = grad_of[index]
                    flow = _flow(context, scope, scopes, grad, apply, builds, compiled_models,
                                 scales_of.get(id(grad_scope.node), []), isinstance_guard, helpers)
                    flow.scale, flow.scale_statement = _scale_of(grad_scope, grad.target, grad.statement,
                                                                 scales_of.get(id(grad_scope.node), []), helpers)
                    flow.path = paths[(id(apply.call), index)]
                    cross_flows.append(flow)
    return Analysis(scopes, flows, builds, all_tapes, scale_calls, isinstance_guard, all_minimizes, all_gradients,
                    cross_flows, context.keras, helpers.bindings, helpers)


def _flow(context, scope, scopes, grad, apply, builds, compiled_models, scales, guard, helpers=None) -> Flow:
    optimizer = apply.optimizer
    build, compiled = _trace(context, scope, scopes, optimizer, builds, compiled_models)
    scale, scale_st = _scale_of(scope, grad.target, grad.statement, scales, helpers)
    unscaled = any(s.method == UNSCALE_METHOD and s.optimizer == optimizer for s in scales)
    user_managed = guard or any(s.conditional for s in scales if s.optimizer == optimizer)
    flow = Flow(scope, grad, apply, optimizer, build, compiled, scale, scale_st, unscaled, user_managed)
    owner, _, attr = optimizer.rpartition(".")
    if build is None and attr == LSO_INNER_ATTRIBUTE and owner:
        wrapper, wrapper_compiled = _trace(context, scope, scopes, owner, builds, compiled_models)
        if wrapper is not None and wrapper.is_lso and not wrapper_compiled:
            flow.inner_of = wrapper
    return flow


def _trace(context, scope: Scope, scopes: list[Scope], optimizer: str, builds: list[OptimizerBuild],
           compiled_models: set[str], depth: int = 0) -> tuple[OptimizerBuild | None, bool]:
    """Where ``optimizer`` (as written in ``scope``) is built; second value: compile wrapped it."""
    module = context.module
    head, _, attr = optimizer.partition(".")
    if head == "self" and scope.class_name is not None:
        matches = [b for b in builds if b.target == optimizer and b.scope.class_name == scope.class_name]
        if matches:
            return matches[-1], False
        stored = _trace_stored_parameter(context, scope, scopes, optimizer, builds, compiled_models) \
            if depth == 0 else None
        if stored is not None:
            return stored
        # Keras sets self.optimizer in compile(); under mixed_float16 it is a LossScaleOptimizer.
        # A closure inside a Keras model's `train_step` (handed to `tf.cond`) sees the same `self.optimizer`
        # (not any class's `train_step`: an orbit trainer's optimizer is its constructor's argument).
        in_step = scope.name == "train_step" or _keras_model_class(context, scope.class_name) and any(
            s.name == "train_step" and s.class_name == scope.class_name and _encloses(s.node, scope.node)
            for s in scopes)
        return None, optimizer == "self.optimizer" and bool(compiled_models or in_step)
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



_MODEL_BASES = ("keras.Model", "keras.models.Model")


def _keras_model_class(context, name: str | None) -> bool:
    """A module-level class ``name`` whose base is a Keras ``Model``."""
    return any(isinstance(stmt, cst.ClassDef) and stmt.name.value == name and
               any(context.resolve(base.value) in _MODEL_BASES for base in stmt.bases)
               for stmt in context.module.body)


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
    return _agreed(results)


def _agreed(results):
    """The one build every call site gives (with its compile flag), else unknown."""
    def same(a, b) -> bool:
        if a[1] != b[1]:
            return False
        return a[0] is b[0] or (a[0] is not None and b[0] is not None and a[0].call is b[0].call)

    if results and all(same(r, results[0]) for r in results):
        return results[0]
    return None, False


def _pairs(target, value) -> list:
    """``self.a, self.b = a, b``: each target with its own value (element-wise where both are tuples)."""
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)) \
            and len(target.elements) == len(value.elements) \
            and not any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)):
        return [p for t, v in zip(target.elements, value.elements) for p in _pairs(t.value, v.value)]
    return [(target, value)]


def _trace_stored_parameter(context, scope, scopes, optimizer, builds, compiled_models):
    """``self.x`` stored from a parameter of one of the class's methods (``def compile(self, d_optimizer)``:
    ``self.d_optimizer = d_optimizer``; ``__init__(self, optimizer)``), followed to that method's calls on
    an instance of the class (``gan.compile(d_optimizer=Adam())``; ``Trainer(model, Adam())``). None: no
    such assignment. A Keras model's ``self.optimizer`` stays compile's."""
    if optimizer == "self.optimizer" and _keras_model_class(context, scope.class_name):
        return None
    stored = [(method, value.value) for method in scopes if method.class_name == scope.class_name
              for st in method.statements if isinstance(st.node, cst.SimpleStatementLine)
              for pair in assigned_targets(st.node) for target, value in _pairs(*pair)
              if dotted_name(target) == optimizer and isinstance(value, cst.Name) and value.value in method.params]
    if len(stored) != 1:
        return None if not stored else (None, False)
    method, param = stored[0]
    index = method.params.index(param) - (1 if method.params[:1] == ["self"] else 0)
    instances = {dotted_name(t) for s in scopes for st in s.statements for t, v in assigned_targets(st.node)
                 if isinstance(v, cst.Call) and isinstance(v.func, cst.Name) and v.func.value == scope.class_name}
    results = []
    for caller in scopes:
        for st in caller.statements:
            for call, _ in (calls_in(st.node) if isinstance(st.node, cst.SimpleStatementLine) else _header_calls(st.node)):
                func = call.func
                if method.name == "__init__":
                    site = isinstance(func, cst.Name) and func.value == scope.class_name
                else:
                    if not (isinstance(func, cst.Attribute) and func.attr.value == method.name):
                        continue
                    receiver = dotted_name(func.value)
                    site = receiver in instances or receiver == "self" and caller.class_name == scope.class_name
                    if not site and _keyword(call, param) is not None:
                        return None, False  # the same method name and keyword on an object of unknown class
                if not site:
                    continue
                arg = _keyword(call, param) or next(
                    (a for i, a in enumerate(x for x in call.args if x.keyword is None) if i == index), None)
                if arg is None:
                    return None, False
                if isinstance(arg.value, cst.Call) and _is_optimizer_constructor(context.resolve(arg.value.func)):
                    results.append((OptimizerBuild(arg.value, optimizer, context.resolve(arg.value.func), caller, st),
                                    False))
                    continue
                text = dotted_name(arg.value)
                if text is None:
                    return None, False
                results.append(_trace(context, caller, scopes, text, builds, compiled_models, depth=1))
    return _agreed(results)
