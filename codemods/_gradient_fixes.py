"""Fixes that keep a training loop's gradient path right (shared by MP101, MP109, MP110, MP303).

No rules live here. Each helper returns LibCST changes ``{original node: replacement}``, or None
where the edit cannot be made without changing what reaches an optimizer:

* ``move_unscale_changes``: Keras 2, unscale right at the gradient call (so every transform after
  it sees unscaled gradients) and drop the later ``get_unscaled_gradients``.
* ``move_clip_changes``: Keras 3, move a constant ``clip_by_global_norm`` / ``clip_by_norm`` /
  ``clip_by_value`` into the inner optimizer's ``global_clipnorm`` / ``clipnorm`` / ``clipvalue``,
  which Keras 3 applies after the LossScaleOptimizer has unscaled, and drop the manual clip.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._loss_scaling_support import new_statement, unscale_call, unused_name
from mpfix.codemods._mp_api_support import keyword_arg
from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.gradient_path import (
    ALL_REDUCE,
    CLIP_GLOBAL_NORM,
    CLIP_NORM,
    CLIP_VALUE,
    Analysis,
    Flow,
    PathEvent,
    UNSCALE_METHOD,
    assigned_targets,
    assigns_name,
    names_in,
    target_names,
)
from mpfix.codemods.analysis.gradient_records import EventKind
from mpfix.codemods.names import dotted_name

HELPER = EventKind.HELPER

CLIP_KEYWORDS = {CLIP_GLOBAL_NORM: "global_clipnorm", CLIP_NORM: "clipnorm", CLIP_VALUE: "clipvalue"}


def describe(event: PathEvent) -> str:
    """How a finding names a transform."""
    if event.kind == "callback":
        return f"`{event.helper}(...)` (which runs the callbacks it is given, e.g. gradient clipping)"
    if event.kind == EventKind.NORMALISE:
        return f"`{event.helper}(...)` (which divides the gradients by their own size)"
    if event.helper is not None:
        return f"`{event.helper}(...)` (which clips or adds noise)"
    if event.kind in ("threshold", "clip_factor"):
        return f"`{cst.Module([]).code_for_node(event.node)}`"
    return "noise" if event.kind == "noise" else f"`{event.kind}`"


def _number(node: cst.BaseExpression) -> float | None:
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _number(node.expression)
        return None if inner is None else -inner
    return None


def _arg(call: cst.Call, position: int, keyword: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[position].value if position < len(positional) else None


def single_assign(event: PathEvent) -> cst.Assign | None:
    st = event.statement
    node = st.node
    if st.conditional or not isinstance(node, cst.SimpleStatementLine) or len(node.body) != 1:
        return None
    small = node.body[0]
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    return small


def pass_through(context, statement: cst.SimpleStatementLine, target: str, source: str):
    """The statement's replacement once the transform is gone: ``target = source``, or nothing."""
    if target == source:
        return cst.RemoveFromParent()
    return new_statement(context, f"{target} = {source}").with_changes(leading_lines=statement.leading_lines)


def constant_clip(context, event: PathEvent) -> tuple[str, cst.BaseExpression, object] | None:
    """(optimizer keyword, its value, the clip statement's replacement) for a movable constant clip."""
    assign = single_assign(event)
    if assign is None or event.kind not in CLIP_KEYWORDS:
        return None
    call = event.node
    value, target = assign.value, assign.targets[0].target
    statement = event.statement.node
    if event.kind == CLIP_GLOBAL_NORM:
        # `grads, _ = tf.clip_by_global_norm(grads, C)` or `grads = tf.clip_by_global_norm(grads, C)[0]`
        if value is call and isinstance(target, cst.Tuple) and len(target.elements) == 2 \
                and isinstance(target.elements[1].value, cst.Name) and target.elements[1].value.value == "_":
            out = target.elements[0].value
        elif isinstance(value, cst.Subscript) and value.value is call and len(value.slice) == 1 \
                and isinstance(value.slice[0].slice, cst.Index) and _number(value.slice[0].slice.value) == 0:
            out = target
        else:
            return None
        source, limit = _arg(call, 0, "t_list"), _arg(call, 1, "clip_norm")
        if limit is None or _number(limit) is None or _number(limit) <= 0:
            return None
    else:
        # `grads = [tf.clip_by_norm(g, C) for g in grads]` / `[tf.clip_by_value(g, -C, C) for g in grads]`
        if not isinstance(value, cst.ListComp) or value.elt is not call or value.for_in.ifs \
                or value.for_in.inner_for_in is not None or not isinstance(value.for_in.target, cst.Name):
            return None
        element = value.for_in.target.value
        first = _arg(call, 0, "t")
        if not (isinstance(first, cst.Name) and first.value == element):
            return None
        source, out = value.for_in.iter, target
        if event.kind == CLIP_NORM:
            limit = _arg(call, 1, "clip_norm")
            if limit is None or _number(limit) is None or _number(limit) <= 0 or len(call.args) != 2:
                return None
        else:
            low, limit = _arg(call, 1, "clip_value_min"), _arg(call, 2, "clip_value_max")
            if low is None or limit is None or _number(limit) is None or _number(low) != -_number(limit) \
                    or len(call.args) != 3:
                return None
    source_name, out_name = dotted_name(source) if source is not None else None, dotted_name(out)
    if source_name is None or out_name is None:
        return None
    return CLIP_KEYWORDS[event.kind], limit, pass_through(context, statement, out_name, source_name)


def with_clip(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call | None:
    """``call`` with ``keyword=value`` added; None if it already clips or takes ``**kwargs``."""
    if any(a.star for a in call.args) or any(a.keyword is not None and a.keyword.value in CLIP_KEYWORDS.values()
                                             for a in call.args):
        return None
    args = list(call.args)
    if args and not isinstance(args[-1].comma, cst.Comma):
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, keyword_arg(keyword, value)])


def move_clip_changes(context, analysis: Analysis, flows: list[Flow], events: list[PathEvent],
                      inner: cst.Call | None) -> tuple[dict, cst.Call] | None:
    """Move every clip in ``events`` into the constructor ``inner``; (changes, new constructor) or None.

    Only where each clip is a constant one, on a plain statement, and what it clips reaches no
    update but those of ``flows`` (one optimizer), so removing it changes nothing else.
    """
    if inner is None or not events:
        return None
    applies = {id(f.apply.call) for f in flows}
    changes: dict = {}
    new_inner = inner
    for event in events:
        found = constant_clip(context, event)
        if found is None:
            return None
        for other in analysis.flows + analysis.cross_flows:
            if any(e is event for e in other.path.events) and id(other.apply.call) not in applies:
                return None
        keyword, limit, replacement = found
        new_inner = with_clip(new_inner, keyword, limit)
        if new_inner is None:
            return None
        changes[event.statement.node] = replacement
    return changes, new_inner


def move_unscale_changes(context, analysis: Analysis, flow: Flow, unscale: PathEvent) -> dict | None:
    """Keras 2: unscale at the gradient call instead of after the transforms; None if not plainly possible."""
    call = unscale.node
    if unscale.helper is not None or not isinstance(call, cst.Call) or unscale.optimizer is None:
        return None
    assign = single_assign(unscale)
    arg = call.args[0] if len(call.args) == 1 else None
    if arg is None or arg.keyword is not None or arg.star or unscale.statement.conditional \
            or not isinstance(unscale.statement.node, cst.SimpleStatementLine):
        return None
    plain = assign is not None and assign.value is call
    source, target = dotted_name(arg.value), dotted_name(assign.targets[0].target) if plain else None
    # Elsewhere (`opt.get_unscaled_gradients(helper(grads))`, `apply_gradients(zip(opt.get_unscaled_gradients(grads),
    # vars))`) the unscale call gives way to its argument, in a statement other than the gradient call's.
    if not (plain and source is not None and target is not None) and unscale.statement is flow.gradient.statement:
        return None
    # An all-reduce before the unscale may be meant for scaled values (a float16 all-reduce of unscaled
    # gradients underflows): leave such loops to the user.
    if any(e.kind == ALL_REDUCE for e in flow.path.events if flow.path.events.index(e) < flow.path.events.index(unscale)):
        return None
    # Every update fed by this gradient computation must pass through this unscale.
    for other in analysis.flows:
        if other.gradient.call is flow.gradient.call and not any(e is unscale for e in other.path.events):
            return None
    gradient = flow.gradient.call
    statement = unscale.statement.node
    kept = pass_through(context, statement, target, source) if plain and source is not None and target is not None \
        else statement.deep_replace(call, arg.value)
    return {gradient: unscale_call(unscale.optimizer, gradient), statement: kept}


# --------------------------------------------------------------------- Keras 3: a helper between scale and apply
_SCALE_READS = frozenset({"dynamic_scale", "loss_scale", "loss_scale_factor", "scale_loss", "get_scaled_loss",
                          UNSCALE_METHOD, "inner_optimizer", "initial_scale", "current_loss_scale"})
_VARIABLE_LISTS = ("trainable_variables", "trainable_weights", "variables", "weights")


def _variable_list(node: cst.BaseExpression, scope, module=None) -> bool:
    """``model.trainable_variables``, a list display, a sum of them, or a name bound once to one (in the scope, or
    in the module where the scope binds none): sources whose gradients ``tape.gradient`` returns as a list (a dict of
    variables gives a dict)."""
    if isinstance(node, (cst.List, cst.Tuple)):
        return not any(isinstance(e, cst.StarredElement) for e in node.elements)
    if isinstance(node, cst.Attribute):
        return node.attr.value in _VARIABLE_LISTS
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _variable_list(node.left, scope) and _variable_list(node.right, scope)
    if isinstance(node, cst.Name):
        bound = [v for st in scope.statements for t, v in assigned_targets(st.node) if node.value in target_names(t)]
        if not bound and module is not None and module is not scope and node.value not in scope.params:
            return _variable_list(node, module)
        return len(bound) == 1 and bound[0] is not None and not isinstance(bound[0], cst.Name) \
            and _variable_list(bound[0], scope)
    return False


def _reads_scale(helpers, helper, seen: set[int]) -> bool:
    """The helper (or a same-file function it calls) reads an optimizer's scale or unscales: it may mean scaled
    units."""
    seen.add(id(helper.node))
    for node in walk(helper.node):
        if isinstance(node, cst.Attribute) and node.attr.value in _SCALE_READS:
            return True
        if isinstance(node, cst.Name) and node.value in _SCALE_READS:
            return True
        if isinstance(node, cst.Call):
            inner = helpers.lookup(node.func, helper)
            if inner is not None and id(inner.node) not in seen and _reads_scale(helpers, inner, seen):
                return True
    return False


def rescale_around_changes(context, analysis: Analysis, flows: list[Flow], flow: Flow,
                           events: list[PathEvent]) -> dict | None:
    """Keras 3: a transform of scaled gradients (a same-file helper, or a clip or noise written in the step) gets them
    divided by the optimizer's scale (what ``LossScaleOptimizer.apply`` divides by: ``scale_loss(1.0)`` is that
    factor, before and after the optimizer is built) and its result is multiplied back, so ``apply`` still checks them
    for overflow, unscales them and moves the dynamic scale. The scale is a power of two: the round trip is exact.
    None where that is not plainly right."""
    if len(events) != 1 or not flow.path.events or flow.path.events[0] is not events[0]:
        return None
    event, gradient = events[0], flow.gradient
    # `grads = tape.gradient(scaled_loss, model.trainable_variables)` ... `out = transform(grads, ...)`, same scope.
    grad_st, st = gradient.statement, event.statement
    grad_assign, assign = _assign(grad_st.node), _assign(st.node)
    if grad_assign is None or assign is None or grad_assign.value is not gradient.call \
            or not isinstance(grad_assign.targets[0].target, cst.Name) or len(gradient.call.args) < 2 \
            or not _variable_list(gradient.call.args[1].value, flow.scope,
                                  next((s for s in analysis.scopes if isinstance(s.node, cst.Module)), None)):
        return None
    source = grad_assign.targets[0].target.value
    statements = flow.scope.statements
    start, end = statements.index(grad_st), statements.index(st)
    if start >= end or any(assigns_name(s.node, source) for s in statements[start + 1:end]) \
            or st.parents[:len(grad_st.parents)] != grad_st.parents or flow.optimizer in context.code(assign.value):
        return None
    target = dotted_name(assign.targets[0].target)
    if event.kind in (HELPER, EventKind.NORMALISE):
        helper = analysis.helpers.lookup(event.node.func, flow.scope) if isinstance(event.node, cst.Call) else None
        if assign.value is not event.node or helper is None or len(event.carriers) != 1 \
                or analysis.helpers.summary(helper)[1:] != (False, False) or _reads_scale(analysis.helpers, helper, set()):
            return None
        carrier = event.node.args[event.carriers[0]]
        if carrier.star or not isinstance(carrier.value, cst.Name) or carrier.value.value != source:
            return None
    elif event.kind in _INLINE and any(n is event.node for n in walk(assign.value)):
        # `grads, norm = tf.clip_by_global_norm(grads, self.clip_norm)`: the first element is the list.
        out = assign.targets[0].target
        if isinstance(out, cst.Tuple) and event.kind == CLIP_GLOBAL_NORM and assign.value is event.node \
                and len(out.elements) == 2:
            target = dotted_name(out.elements[0].value)
        # The statement reads gradients only through `source` (nothing between derives a value from them), and
        # no comprehension in it rebinds that name.
        if names_in(assign.value) & _derived(statements[start + 1:end], source) != {source} or any(
                isinstance(n, cst.CompFor) and source in target_names(n.target) for n in walk(assign.value)):
            return None
    else:
        return None
    if target is None:
        return None
    # The helper's result is the gradient list the update takes (`apply(out, vars)`, `apply_gradients(zip(out, vars))`),
    # not pairs or a tuple that the comprehension scaling it back would take apart.
    given = flow.apply.call.args[0].value if flow.apply.call.args else None
    pairs = isinstance(flow.apply.call.func, cst.Attribute) and flow.apply.call.func.attr.value == "apply_gradients"
    if pairs:  # apply_gradients takes (gradient, variable) pairs: `zip(out, vars)`
        zipped = isinstance(given, cst.Call) and isinstance(given.func, cst.Name) and given.func.value == "zip" \
            and given.args
        given = given.args[0].value if zipped else None
    if given is None or dotted_name(given) != target or flow.apply.statement not in statements \
            or any(assigns_name(s.node, target) for s in statements[end + 1:statements.index(flow.apply.statement)]):
        return None
    applies = {id(f.apply.call) for f in flows}
    if any(any(e is event for e in other.path.events) and id(other.apply.call) not in applies
           for other in analysis.flows + analysis.cross_flows):
        return None
    divide = context.imports.local_name_for("keras.ops.divide") or context.imports.local_name_for(
        "tensorflow.keras.ops.divide")
    if divide is None:
        return None
    multiply = divide[:-len("divide")] + "multiply"
    scale = unused_name(flow.scope, "loss_scale")
    unscaled = source if target == source else unused_name(flow.scope, "unscaled_grads")
    new_value = assign.value if unscaled == source else _renamed(assign.value, source, unscaled)
    lines = [f"{scale} = {flow.optimizer}.scale_loss(1.0)",
             f"{unscaled} = [None if g is None else {divide}(g, {scale}) for g in {source}]",
             None,
             f"{target} = [None if g is None else {multiply}(g, {scale}) for g in {target}]"]
    new = [new_statement(context, line) if line else st.node.with_deep_changes(assign, value=new_value)
           for line in lines]
    new[0] = new[0].with_changes(leading_lines=st.node.leading_lines)
    new[2] = new[2].with_changes(leading_lines=())
    return {st.node: cst.FlattenSentinel(new)}


def _assign(node: cst.BaseStatement) -> cst.Assign | None:
    if not isinstance(node, cst.SimpleStatementLine) or len(node.body) != 1:
        return None
    small = node.body[0]
    return small if isinstance(small, cst.Assign) and len(small.targets) == 1 else None


_INLINE = frozenset({CLIP_GLOBAL_NORM, CLIP_NORM, CLIP_VALUE, EventKind.CLIP_AVERAGE_NORM, EventKind.NOISE,
                     EventKind.CLIP_FACTOR})


def _derived(statements, source: str) -> set[str]:
    """``source`` and every name a statement reading it touches (assigned, appended to, or only read there):
    what may carry values derived from the gradients (conservative)."""
    tainted = {source}
    changed = True
    while changed:
        changed = False
        for st in statements:
            names = names_in(st.node)
            if names & tainted and not names <= tainted:
                tainted |= names
                changed = True
    return tainted


class _Rename(cst.CSTTransformer):
    def __init__(self, old: str, new: str) -> None:
        super().__init__()
        self.old, self.new = old, new

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.new) if updated.value == self.old else updated

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)  # `x.grads` is a field, not a read of `grads`

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)  # `f(grads=...)` names a parameter


def _renamed(node: cst.BaseExpression, old: str, new: str) -> cst.BaseExpression:
    """``node`` reading ``new`` wherever it read ``old``."""
    return node.visit(_Rename(old, new))
