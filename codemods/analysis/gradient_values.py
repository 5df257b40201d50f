"""Values of the gradient path and what the tracer consults: a value maps each gradient computation
it carries to its states and the events on its way; same-file helpers gradients are passed to, the
registry of events, and which expressions read the loss scale."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import children, walk
from mpfix.codemods.analysis.bindings import Bindings, BindingKind, decompose
from mpfix.codemods.analysis.gradient_records import (
    FileView, EventKind, SCALE_METHODS, CALLBACK, PathEvent, Scope, ScaleCall, Statement, UNSCALE_METHOD,
    _ALL_REDUCE_METHODS, _RANDOM_PREFIXES, _SCALE_ATTRIBUTES, _TRANSFORM_FUNCTIONS,
)
from mpfix.codemods.analysis.gradient_syntax import assigned_targets, calls_in, names_in, target_names
from mpfix.codemods.facts import ops
from mpfix.codemods.names import dotted_name

def _scale_of(scope: Scope, target: cst.BaseExpression, before: Statement, scales: list[ScaleCall],
              helpers: "_Helpers | None" = None) -> tuple[ScaleCall | None, Statement | None]:
    """The scaling call whose result is ``target`` (a name assigned from it, from a same-file helper that
    returns it, or the call itself)."""
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
            returned = _returned_scale(helpers, scope, value, _position(t, target.value)) \
                if helpers is not None and isinstance(value, cst.Call) and not inner else None
            if inner:
                found = (inner[0], st)
            elif returned is not None:
                found = (returned, st)
            elif found[0] is not None and (
                    any(isinstance(small, cst.AugAssign) for small in st.node.body)
                    or target.value in names_in(value)):
                pass  # `scaled += term` / `scaled = scaled + term`: still scaled (MP105 reports the term)
            else:
                found = (None, None)  # rebound to something unscaled
    return found


def _position(target: cst.BaseExpression, name: str) -> int | None:
    """Where ``name`` sits in an unpacking target (``loss, scaled = ...``: 1); None for the whole value, -1
    for anything else (starred, nested): the binding model's one target decomposition says."""
    for binding in decompose(target, None, None, (), BindingKind.ASSIGN):  # in source order
        if binding.starred:
            return -1  # `*rest, scaled = ...`: later positions are not the returned tuple's
        if binding.name == name:
            return -1 if len(binding.path) > 1 else binding.element
    return -1


def _returned_scale(helpers: "_Helpers", caller: Scope, call: cst.Call, position: int | None) -> ScaleCall | None:
    """The scaling a same-file helper returns (``return opt.scale_loss(loss)``, ``return loss, scaled`` with
    ``scaled = opt.scale_loss(loss)`` in its body; ``position``: the element the caller unpacks), its
    optimizer as the caller names it (a parameter is the call's argument). None where that is not plain."""
    helper = helpers.lookup(call.func, caller)
    if helper is None or position == -1 or not isinstance(helper.node, cst.FunctionDef):
        return None
    returns = [(i, st, small) for i, st in enumerate(helper.statements) if isinstance(st.node, cst.SimpleStatementLine)
               for small in st.node.body if isinstance(small, cst.Return)]
    if len(returns) != 1 or returns[0][1].conditional or returns[0][2].value is None:
        return None
    at, statement, value = returns[0][0], returns[0][1], returns[0][2].value
    if position is not None:
        if not isinstance(value, cst.Tuple) or position >= len(value.elements) \
                or isinstance(value.elements[position], cst.StarredElement):
            return None
        value = value.elements[position].value
    if isinstance(value, cst.Name):  # the last binding of the name before the return
        bound = [(st, v) for st in helper.statements[:at] for t, v in assigned_targets(st.node)
                 if value.value in target_names(t)]
        if not bound or bound[-1][0].conditional or not isinstance(bound[-1][0].node, cst.SimpleStatementLine):
            return None
        statement, value = bound[-1]
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in SCALE_METHODS):
        return None
    optimizer = dotted_name(value.func.value)
    head, dot, rest = (optimizer or "").partition(".")
    if head in helper.params:  # the caller's argument for that parameter
        index = helper.params.index(head) - (1 if helper.params[:1] == ["self"] else 0)
        arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == head), None) or next(
            (a for i, a in enumerate(x for x in call.args if x.keyword is None) if i == index), None)
        given = dotted_name(arg.value) if arg is not None else None
        optimizer = given + dot + rest if given else None
    elif head == "self" and helper.class_name != caller.class_name:
        optimizer = None
    if optimizer is None:
        return None
    return ScaleCall(value, statement, value.func.attr.value, optimizer, False, helper)


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

    def __init__(self, context: FileView, scopes: list[Scope]) -> None:
        self.context = context
        self.functions: dict[tuple[str | None, str], Scope] = {}
        for scope in scopes:
            if isinstance(scope.node, cst.FunctionDef) and scope.params:
                self.functions.setdefault((scope.class_name, scope.name), scope)
        self.bindings = Bindings(scopes)
        self.instances = _instances(self.bindings, {c for c, _ in self.functions if c is not None})
        self._summaries: dict[int, tuple[bool, bool]] = {}

    def lookup(self, func: cst.BaseExpression, caller: Scope) -> Scope | None:
        """The same-file function or method ``func`` calls: ``f(...)``, ``self.m(...)``, or ``obj.m(...)``
        where ``obj`` is bound to an instance of a class of this file (``self.acc = Accumulator(...)``)."""
        if isinstance(func, cst.Name):
            return self.functions.get((None, func.value))
        if not isinstance(func, cst.Attribute):
            return None
        if isinstance(func.value, cst.Name) and func.value.value == "self" and caller.class_name is not None:
            return self.functions.get((caller.class_name, func.attr.value))
        owner = dotted_name(func.value)
        cls = self.instances.get((caller.class_name if (owner or "").startswith("self.") else None, owner or ""))
        return self.functions.get((cls, func.attr.value)) if cls is not None else None

    def summary(self, scope: Scope, params: frozenset = frozenset()) -> tuple[EventKind | None, bool, bool]:
        """(what size-sensitive thing the helper does: "helper" (clips or adds noise), "callback"
        (calls a function it was given, e.g. a list of gradient callbacks), "normalise" (divides the gradients,
        its parameters ``params``, by their own size), or None; whether it unscales; whether it all-reduces)."""
        found = self._summaries.get(id(scope.node))
        if found is not None and found[0] is None and params and normalises(self.context, scope, params):
            return (EventKind.NORMALISE,) + found[1:]
        if found is None:
            sensitive: EventKind | None = None
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
                        sensitive = EventKind.HELPER
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
                    sensitive = EventKind.HELPER
                if kind is cst.Call and sensitive is None and _threshold_select(self.context, node):
                    sensitive = EventKind.HELPER
            found = self._summaries[id(scope.node)] = (sensitive, unscales, reduces)
            return self.summary(scope, params)
        return found


_OWN_SIZE = (ops.Kind.NORM, ops.Kind.DEVIATION)


def normalises(context: FileView, scope: Scope, params: frozenset) -> bool:
    """``g / norm(g)``, ``g / (g_norm + eps)`` with ``g_norm = norm(g)``, ``l2_normalize(g)`` on what ``params``
    get (and loop targets over them: ``for g, p in zip(grads, params)`` follows ``g`` only): the result does not
    depend on the gradients' scale, so scaled gradients lose the loss scale before the optimizer divides by it
    (updates 1/scale)."""
    given, sized = set(params), set()
    for node in walk(scope.node.body):
        if isinstance(node, (cst.For, cst.CompFor)):
            zipped = isinstance(node.target, (cst.Tuple, cst.List)) and isinstance(node.iter, cst.Call) \
                and isinstance(node.iter.func, cst.Name) and node.iter.func.value == "zip"
            pairs = [(e.value, a.value) for e, a in zip(node.target.elements, node.iter.args)] if zipped \
                else [(node.target, node.iter)]
            for target, source in pairs:
                if names_in(source) & given:
                    given |= target_names(target)

    def size_of(node: cst.CSTNode) -> bool:
        return bool(names_in(node) & sized) or any(
            (spec := ops.known(context.resolve(call.func))) is not None and any(spec.has(k) for k in _OWN_SIZE)
            and call.args and names_in(call.args[0].value) & given for call, _ in calls_in(node))

    for node in walk(scope.node.body):
        if isinstance(node, cst.Assign) and size_of(node.value):
            for target in node.targets:
                sized |= target_names(target.target)
    for node in walk(scope.node.body):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide) \
                and names_in(node.left) & given and size_of(node.right):
            return True
        if isinstance(node, cst.Call) and node.args and names_in(node.args[0].value) & given \
                and (spec := ops.known(context.resolve(node.func))) is not None and spec.has(ops.Kind.L2_NORMALIZE):
            return True
    return False


def _instances(bindings, classes: set[str]) -> dict[tuple[str | None, str], str]:
    """(class of the binding method or None, bound name) -> class of this file it holds an instance of:
    ``self.accumulator = GradientAccumulator(...)`` in ``Trainer``, ``acc = Accumulator()`` anywhere
    (a constructor parameter's default too: ``def __init__(self, acc=Accumulator()): self.acc = acc``)."""
    found: dict[tuple[str | None, str], str] = {}
    for scope in bindings.scopes:
        for name, bound in bindings.of(scope).names.items():
            candidates = bindings.attribute(scope.class_name, name) if name.startswith("self.") else bound
            for binding in candidates:
                value = binding.value
                if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in classes:
                    found[(scope.class_name if name.startswith("self.") else None, name)] = value.func.value
    return found


def _threshold_select(context: FileView, call: cst.Call) -> bool:
    """``where(g_norm > max_norm, clipped, g)`` (adaptive gradient clipping, a clip by hand): a select op (the op
    table's SELECT) whose condition orders two values, neither 0 nor infinity. On gradients that still carry the loss
    scale the test is decided 32768 times off, so a helper doing it is as size-sensitive as one calling clip_by_norm."""
    spec = ops.known(context.resolve(call.func))
    condition = call.args[0].value if call.args and call.args[0].keyword is None else None
    if spec is None or not spec.has(ops.Kind.SELECT) or not isinstance(condition, cst.Comparison):
        return False
    sides = [condition.left] + [c.comparator for c in condition.comparisons]
    return all(isinstance(c.operator, _ORDERING) for c in condition.comparisons) and not any(
        isinstance(side, (cst.Integer, cst.Float)) and side.evaluated_value == 0 for side in sides)


def _has_random(context: FileView, expr: cst.CSTNode) -> bool:
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
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "scale_loss" and len(expr.args) == 1 \
                and _number(expr.args[0].value) == 1:  # Keras 3's `opt.scale_loss(1.0)`: the scale itself
            return dotted_name(expr.func.value) or ""
        if expr.args and isinstance(expr.func, (cst.Name, cst.Attribute)) and \
                (dotted_name(expr.func) or "").rpartition(".")[2] == "cast":
            return _scale_read(expr.args[0].value)
    return None


def divided_by_scale(context, call: cst.Call,
                     names: dict[str, str] | None = None) -> tuple[cst.BaseExpression, str] | None:
    """``tf.math.divide(g, opt.dynamic_scale)`` / ``keras.ops.divide(...)`` (any op the table calls a
    division): (the dividend, the optimizer whose scale divides it), else None. ``names``: local names bound to a
    read of the scale (``loss_scale = opt.scale_loss(1.0)``) -> their optimizer."""
    spec = ops.lookup(context.resolve(call.func))
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    if spec is None or ops.Kind.DIVISION not in spec.kinds or len(positional) != 2:
        return None
    owner = _scale_of_name(positional[1], names)
    return None if owner is None else (positional[0], owner)


def _scale_of_name(expr: cst.BaseExpression, names: dict[str, str] | None) -> str | None:
    if isinstance(expr, cst.Name) and names and expr.value in names:
        return names[expr.value]
    return _scale_read(expr)


def multiplied_by_scale(context, node: cst.CSTNode, names: dict[str, str]) -> tuple[cst.BaseExpression, str] | None:
    """``g * loss_scale`` / ``keras.ops.multiply(g, loss_scale)`` (either order), the scale read of an optimizer:
    (the other factor, that optimizer), else None. Gradients unscaled by hand carry the scale again."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        pair = [node.left, node.right]
    elif isinstance(node, cst.Call) and (context.resolve(node.func) or "").rpartition(".")[2] == "multiply" \
            and len(node.args) == 2 and not any(a.keyword is not None or a.star for a in node.args):
        pair = [a.value for a in node.args]
    else:
        return None
    for factor, other in (pair, pair[::-1]):
        owner = _scale_of_name(other, names)
        if owner is not None:
            return factor, owner
    return None


def not_none_branch(node: cst.IfExp) -> cst.BaseExpression | None:
    """``None if g is None else f(g)`` / ``g if g is None else f(g)`` (and ``is not None`` the other way round):
    ``f(g)``, the branch that gets a gradient (a None carries none), else None."""
    test = node.test
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name)
            and isinstance(test.comparisons[0].comparator, cst.Name)
            and test.comparisons[0].comparator.value == "None"):
        return None
    operator = type(test.comparisons[0].operator)
    if operator not in (cst.Is, cst.IsNot):
        return None
    none, other = (node.body, node.orelse) if operator is cst.Is else (node.orelse, node.body)
    if isinstance(none, cst.Name) and none.value in ("None", test.left.value):
        return other
    return None


def fixed_scale(registry: "_Registry", context, scope, divisor: cst.BaseExpression) -> str | None:
    """The optimizer whose ``loss_scale_factor=`` is this same expression (``g / LOSS_SCALE`` with
    ``SGD(loss_scale_factor=LOSS_SCALE)``), unless ``scope`` binds a name of it that the build's scope does not see."""
    found = registry.scale_factors.get(context.code(divisor))
    if found is None:
        return None
    optimizer, build_scope = found
    names, text = names_in(divisor), context.code(divisor)
    for st in scope.statements:
        if build_scope != id(scope.node) and any(names & target_names(t) for t, _ in assigned_targets(st.node)):
            return None
        # `optimizer.scale_loss(loss) * LOSS_SCALE`: the step scales by hand too, and the division undoes that.
        if any(type(n.operator) is cst.Multiply and text in (context.code(n.left), context.code(n.right))
               for n in walk(st.node) if isinstance(n, cst.BinaryOperation)):
            return None
    return optimizer


def reciprocal_scale(context, expr: cst.BaseExpression) -> str | None:
    """``1.0 / opt.dynamic_scale`` or ``tf.math.reciprocal(opt.dynamic_scale)``: the optimizer whose
    scale ``expr`` inverts, else None (a gradient times it is unscaled by hand)."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Divide) and \
            isinstance(expr.left, (cst.Integer, cst.Float)) and float(expr.left.value) == 1.0:
        return _scale_read(expr.right)
    if isinstance(expr, cst.Call) and len(expr.args) == 1 and \
            (context.resolve(expr.func) or "").rpartition(".")[2] == "reciprocal":
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
        # What a same-file function that takes gradients returns: its node id -> the value of its returns.
        self.returns: dict[int, dict] = {}
        # The source of each `loss_scale_factor=` an optimizer build of the file is given (a fixed scale):
        # its code -> (the optimizer, the node id of the scope building it). A gradient divided by it is
        # unscaled by hand.
        self.scale_factors: dict[str, tuple[str, int]] = {}


_ORDERING = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)


def _comparisons(test: cst.BaseExpression) -> list[cst.Comparison]:
    """The comparisons a condition is made of (through `not`, `and`, `or` and parentheses)."""
    if isinstance(test, cst.Comparison):
        return [test]
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _comparisons(test.expression)
    if isinstance(test, cst.BooleanOperation):
        return _comparisons(test.left) + _comparisons(test.right)
    return []


def _reads_scale(node: cst.BaseExpression, scale_names: dict[str, str]) -> bool:
    """The threshold is in scaled units: it reads the optimizer's scale (`MAX_NORM * opt.dynamic_scale`)."""
    if _scale_read(node) is not None or (isinstance(node, cst.Name) and node.value in scale_names):
        return True
    return any(_reads_scale(child, scale_names) for child in children(node))


def clip_factor(context, call: cst.Call) -> bool:
    """``minimum(1, C / n)`` (either order): the coefficient clip_by_norm multiplies by, written by hand (a DP-SGD
    per-example clip); the tracer records it when ``n`` carries gradient values."""
    spec = ops.known(context.resolve(call.func))
    args = [a.value for a in call.args if a.keyword is None and not a.star]
    return spec is not None and spec.has(ops.Kind.CEILING) and len(args) == 2 and len(call.args) == 2 and \
        any(_number(a) == 1 for a in args) and \
        any(isinstance(a, cst.BinaryOperation) and isinstance(a.operator, cst.Divide) for a in args)


def _number(node: cst.BaseExpression) -> float | None:
    return float(node.value) if isinstance(node, (cst.Integer, cst.Float)) else None
