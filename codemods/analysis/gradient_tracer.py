"""The gradient path: follows gradient values through one scope, statement by statement, recording
what happens to them (clips, noise, accumulation, all-reduce, unscaling) and in which ``State``."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import children
from mpfix.codemods.analysis.gradient_records import (
    FileView, ACCUMULATE, ALL_REDUCE, APPLY_METHODS, ApplyCall, CLIP_FACTOR, GradientCall, GradientPath, MANUAL_UNSCALE,
    NOISE, PathEvent, RESCALE, SCALED, SCALE_METHODS, ScaleCall, Scope, Statement, THRESHOLD, UNSCALE, UNSCALED,
    UNSCALE_METHOD, _ACCUMULATE_METHODS, _AFTER_MANUAL, _AFTER_RESCALE, _AFTER_UNSCALE, _ALL_REDUCE_METHODS, _BUILTINS,
    _TRANSFORM_FUNCTIONS,
)
from mpfix.codemods.analysis.gradient_syntax import assigned_targets, target_names
from mpfix.codemods.analysis.gradient_values import (
    _ORDERING, _Helpers, _Registry, _comparisons, _has_random, _merge, _reads_scale, _root_key, _scale_of, _scale_read,
    clip_factor, divided_by_scale, fixed_scale, multiplied_by_scale, not_none_branch, reciprocal_scale,
)
from mpfix.codemods.names import dotted_name


class _PathTracer:
    """Follows gradient values through one scope, statement by statement (two passes for loops)."""

    def __init__(self, context: FileView, scope: Scope, gradients: list[GradientCall],
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
        # Loop targets that stand for the elements of a container: `for total, g in zip(self.sums, grads)`
        # makes `total.assign_add(g)` accumulate into `self.sums`.
        self._aliases: dict[str, str] = {}
        # Local names bound to a read of the loss scale (`scale = opt.dynamic_scale`): name -> its optimizer.
        self._scale_names: dict[str, str] = {}
        self.apply_values: dict[int, dict] = {}
        self.by_call: dict[int, tuple[int, frozenset]] = {}
        for g in gradients:
            scale, _ = _scale_of(scope, g.target, g.statement, scales, helpers)
            state = SCALED if scale is not None and scale.method in SCALE_METHODS else UNSCALED
            self.by_call[id(g.call)] = (g.index, frozenset({state}))
        self._position = {id(st.node): i for i, st in enumerate(scope.statements)}
        self.statement: Statement | None = None
        self._gates: dict[int, tuple[cst.If, dict]] = {}  # `if` statements testing gradient sizes: id -> (if, value)

    def order(self, event: PathEvent) -> tuple[int, int]:
        # Events of another scope (a value accumulated elsewhere) come first.
        return self._position.get(id(event.statement.node), -1), self._sequence[id(event)]

    def paths(self, applies: list[ApplyCall]) -> dict[tuple[int, int], GradientPath]:
        """The path of each gradient computation into each update of this scope (sets apply.gradients)."""
        out: dict[tuple[int, int], GradientPath] = {}
        for apply in applies:
            value = self.apply_values.get(id(apply.call), {})
            for gate, gated in self._gates.values():  # an update under a size test: the test is on its path
                if gate in apply.statement.parents:
                    value = {i: (s, e | gated[i][1]) if i in gated else (s, e) for i, (s, e) in value.items()}
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
            self._alias(node.target, node.iter)
            self._bind(node.target, self.eval(node.iter, {}), False)
            return
        if isinstance(node, cst.With):
            for item in node.items:
                self.eval(item.item, {})
            return
        if isinstance(node, (cst.If, cst.While)):
            self.eval(node.test, {})
            if isinstance(node, cst.If):
                self._gate(node)
            return
        if not isinstance(node, cst.SimpleStatementLine):
            return
        for small in node.body:
            kind = type(small)
            if kind is cst.Assign:
                value = self.eval(small.value, {})
                owner = _scale_read(small.value)
                for target in small.targets:
                    if isinstance(target.target, cst.Name):
                        if owner is None:
                            self._scale_names.pop(target.target.value, None)
                        else:
                            self._scale_names[target.target.value] = owner
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
                value = self.eval(small.value, {})
                if value:
                    key = id(self.scope.node)
                    self.registry.returns[key] = _merge(self.registry.returns.get(key, {}), value)

    def _gate(self, node: cst.If) -> None:
        """``if grad_norm < MAX_NORM:``: an ordering test of a gradient value against a threshold that is
        not scale-free (0, inf) and does not read the loss scale."""
        for comparison in _comparisons(node.test):
            sides = [comparison.left] + [t.comparator for t in comparison.comparisons]
            ordering = all(isinstance(t.operator, _ORDERING) for t in comparison.comparisons)
            values = [self.eval(side, {}) for side in sides]
            if not ordering or sum(bool(v) for v in values) != 1:
                continue
            threshold = next(side for side, v in zip(sides, values) if not v)
            if self._scale_free(threshold) or _reads_scale(threshold, self._scale_names):
                continue
            tested = next(v for v in values if v)
            self._gates[id(node)] = (node, self._event(THRESHOLD, comparison, tested))
            return

    def _scale_free(self, node: cst.BaseExpression) -> bool:
        """0 and infinity: a positive loss scale does not move them (`norm > 0`, `norm < float("inf")`)."""
        if isinstance(node, (cst.Integer, cst.Float)):
            return node.evaluated_value == 0
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "float" \
                and len(node.args) == 1 and isinstance(node.args[0].value, cst.SimpleString):
            return node.args[0].value.evaluated_value.strip().lower().lstrip("+-") in ("inf", "infinity")
        return self.context.resolve(node) in ("numpy.inf", "math.inf")

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
        if kind is cst.IfExp and (branch := not_none_branch(expr)) is not None:
            return self.eval(branch, overlay)  # `None if g is None else f(g)`: a None carries no gradient
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
        if clip_factor(self.context, call):  # `minimum(1, C / norm(g))`: clip_by_norm's coefficient by hand
            value = self._args(call, overlay)
            return self._event(CLIP_FACTOR, call, value) if value else {}
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
        divided = divided_by_scale(self.context, call, self._scale_names)
        if divided is not None and (value := self.eval(divided[0], overlay)):
            return self._event(MANUAL_UNSCALE, call, value, divided[1] or None, state=_AFTER_MANUAL)
        if (rescaled := self._rescaled(call, overlay)) is not None:
            return rescaled
        qualified = self.context.resolve(func)
        transform = _TRANSFORM_FUNCTIONS.get(qualified) if qualified else None
        if transform is not None:
            value = self._args(call, overlay)
            return self._event(transform, call, value) if value else {}
        helper = self.helpers.lookup(func, self.scope)
        if helper is not None and helper is not self.scope:
            values = [self.eval(arg.value, overlay) for arg in call.args]
            value = _merge(*values)
            if not value:  # gradients the helper takes itself and returns (`loss, grads = compute(x, y)`)
                return dict(self.registry.returns.get(id(helper.node), {}))
            sensitive, unscales, reduces = self.helpers.summary(helper, self._passed(helper, func, call, values))
            if reduces:
                value = self._event(ALL_REDUCE, call, value, helper=helper.name)
            if sensitive:
                value = self._event(sensitive, call, value, helper=helper.name)
                self.events[self._event_ids[(id(call), sensitive)]].carriers = tuple(i for i, v in enumerate(values) if v)
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

    def _passed(self, helper: Scope, func: cst.BaseExpression, call: cst.Call, values: list[dict]) -> frozenset:
        """Remember which parameters of ``helper`` get gradients, for following them inside it; their names."""
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
        return frozenset(bound)

    def _accumulate(self, key: str | None, value: dict) -> None:
        if key is not None:
            self._store(key, value, False)
            self._accumulated.add(key)
            container = self._aliases.get(key)
            if container is not None and container != key:
                self._store(container, value, False)
                self._accumulated.add(container)

    def _alias(self, target: cst.BaseExpression, iterable: cst.BaseExpression) -> None:
        """Remember which containers a loop's targets are elements of (``for x in c``, ``zip(c, d)``)."""
        pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
        if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "zip" \
                and isinstance(target, (cst.Tuple, cst.List)):
            pairs = [(el.value, arg.value) for el, arg in zip(target.elements, iterable.args) if not arg.star]
        else:
            pairs = [(target, iterable)]
        for element, container in pairs:
            name = dotted_name(element) if isinstance(element, cst.Name) else None
            key = _root_key(container) if isinstance(container, (cst.Name, cst.Attribute, cst.Subscript)) else None
            if name is not None and key is not None:
                self._aliases[name] = key

    def _binary(self, node: cst.BinaryOperation, overlay: dict) -> dict:
        left = self.eval(node.left, overlay)
        right = self.eval(node.right, overlay)
        operator = type(node.operator)
        if operator is cst.Divide and left and not right:
            owner = _scale_read(node.right)
            if owner is None and isinstance(node.right, cst.Name):
                owner = self._scale_names.get(node.right.value)
            if owner is None and self.registry.scale_factors:
                owner = fixed_scale(self.registry, self.context, self.scope, node.right)
            if owner is not None:
                return self._event(MANUAL_UNSCALE, node, left, owner or None, state=_AFTER_MANUAL)
        if operator is cst.Multiply and bool(left) != bool(right):
            owner = reciprocal_scale(self.context, node.right if left else node.left)
            if owner is not None:
                return self._event(MANUAL_UNSCALE, node, left or right, owner or None, state=_AFTER_MANUAL)
            if (rescaled := self._rescaled(node, overlay)) is not None:
                return rescaled
        if operator in (cst.Add, cst.Subtract) and (left or right):
            # `g + tf.random.normal(tf.shape(g), stddev=s)`: the noise side may read g's shape.
            for value, other in ((left, node.right), (right, node.left)):
                if value and isinstance(other, cst.Call) and _has_random(self.context, other):
                    return self._event(NOISE, node, value)
        return _merge(left, right)

    def _rescaled(self, node: cst.CSTNode, overlay: dict) -> dict | None:
        """Gradients times a read of the loss scale (``ops.multiply(g, loss_scale)``): they carry it again."""
        found = multiplied_by_scale(self.context, node, self._scale_names)
        if found is not None and (value := self.eval(found[0], overlay)):
            return self._event(RESCALE, node, value, found[1] or None, state=_AFTER_RESCALE)

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

