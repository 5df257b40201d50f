"""Source edits that ``mpfix repair`` tries at an op's exact node, built with LibCST.

* ``float32_island(text, line, column, op)``: compute the expression of ``op`` in float32.
  Its float16 operands are cast to float32, the expression is computed, and the result is
  cast back to the compute dtype (``self.compute_dtype`` inside a layer's method, else the
  dtype of the expression's first named operand). The island grows from the op's node:
  an op that *overflows* (a matmul, a sum, an exp) is useless alone, since casting its
  result back to float16 gives the same inf. So it grows to the nearest enclosing call that
  brings values back into range (``_range_reducing``: softmax, log, a division...), else to
  the whole expression of the statement, and on to the next statement when that is where the
  value is brought back (``scores = matmul(q, k^T)`` then ``weights = softmax(scores)``, the
  name read there only: the scores stay float32 in between, the cast back follows the
  softmax); or it stops inside the user's own cast to float32
  (``tf.cast(reduce_mean(exp(x)), tf.float32)``), which then takes the island's float32
  result with no cast back. An op that fails on its *domain* (``log`` of a
  probability that underflowed to 0) keeps its node, whose operands then include the
  producer on the same line (``log(softmax(x))``: ``x`` is cast).
  Written as the module's Keras generation needs: ``keras.ops.cast(x, "float32")`` in a
  backend-agnostic module (it uses ``keras.ops`` and does not import TensorFlow),
  ``tf.cast(x, tf.float32)`` otherwise.
* ``layer_float32(text, line, class_name)``: ``dtype="float32"`` on the layer built on
  ``line`` (the constructor call of ``class_name``, else the only constructor call there).

Both return the new text, or None when the node is not found or the edit does not apply.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider

from mpfix.codemods.facts import ops
from mpfix.verify.cst_edits import (
    OPERATORS,
    CastStyle,
    Replace,
    call_name,
    in_method,
    parsed,
    resolve_positions,
    spelling,
)
from mpfix.verify.evidence import op_names

# Graph ops whose result overflows, by their class in the table (the island must reach past them): exponentials,
# powers, squares, contractions, long sums and products, and the operators' arithmetic (not a division).
_OVERFLOWING_KINDS = (ops.Kind.EXP, ops.Kind.POW, ops.Kind.SQUARE, ops.Kind.SQUARED_SUM, ops.Kind.MATMUL,
                      ops.Kind.LONG_SUM, ops.Kind.PRODUCT)
OVERFLOWING = frozenset(
    graph_op for graph_op in ops.GRAPH_OPS if any(
        spec.has(*_OVERFLOWING_KINDS) or spec.has(ops.Kind.ARITHMETIC) and not spec.has(ops.Kind.DIVISION)
        for spec in ops.graph_specs(graph_op))
)
# Graph ops that divide: a divisor below 1 (a temperature of 0.002) makes a quotient past 65504 from finite operands,
# which the run shows (a non-finite output of finite inputs); the candidates then ask for an island grown like an
# overflowing op's (``grow``), cast back only where the values are in range again (after the softmax).
DIVIDING = frozenset(graph_op for graph_op in ops.GRAPH_OPS
                     if any(spec.has(ops.Kind.DIVISION) for spec in ops.graph_specs(graph_op)))
# Calls whose result is back in float16's range, by their class in the one table of ops: probabilities, log
# probabilities, logs and square roots, l2_normalize, logsumexp, values in [-1, 1] (tanh); and the division
# operator. Not a mean: the mean of squares that overflowed is past 65504 too.
_RANGE_REDUCING_KINDS = (ops.Kind.PROBABILITY, ops.Kind.LOG_PROBABILITY, ops.Kind.SHRINKS, ops.Kind.L2_NORMALIZE,
                         ops.Kind.LOGSUMEXP, ops.Kind.BOUNDED)


def _math_spec(name: str | None) -> ops.OpSpec | None:
    """The table's spec of a call spelled ``name`` when its tensor arguments are values of the computation (cast
    inside the island at the positions its result's dtype follows, ``dtype_args``); None for any other call (a layer,
    a reshape, a split, a creator or a cast), which is an operand as a whole. Index arguments are no obstacle: only
    the ``dtype_args`` are cast (``unsorted_segment_sum(messages, ids, n)``: the messages, never the segment ids)."""
    spec = ops.by_short_name(name) if name else None
    if spec is None or spec.result is not ops.Result.PRESERVES or spec.keeps_bool or not spec.elementwise \
            or spec.tensor_list or spec.elements is not ops.Elements.UNKNOWN:
        return None
    return spec


def _range_reducing(name: str | None) -> bool:
    spec = ops.by_short_name(name) if name else None
    return name == "/" or (spec is not None and spec.has(*_RANGE_REDUCING_KINDS))


def _math(expr) -> bool:
    """An operator, or a call of a math op (``_math_spec``): the island goes inside it."""
    if isinstance(expr, cst.BinaryOperation):
        return spelling(expr) in _OPERATOR_NAMES
    return isinstance(expr, cst.Call) and _math_spec(spelling(expr)) is not None


_OPERATOR_NAMES = frozenset(OPERATORS.values())


def _find(wrapper: MetadataWrapper, line: int, column: int, op: str):
    """The expression node of ``op`` starting at ``line``:``column`` (1-based column)."""
    names = op_names().get(op, ())
    positions = resolve_positions(wrapper)
    best = None
    for node, pos in positions.items():
        if not isinstance(node, (cst.Call, cst.BinaryOperation)):
            continue
        if pos.start.line != line or pos.start.column != column - 1:
            continue
        if spelling(node) in names:
            best = node if best is None else best
    return best


def _casts_to_float32(call) -> bool:
    """``tf.cast(x, tf.float32)`` / ``ops.cast(x, "float32")`` / ``cast(x, dtype="float32")``."""
    if call_name(call) != "cast" or len(call.args) < 2:
        return False
    dtype = call.args[1].value
    if isinstance(dtype, cst.SimpleString):
        return dtype.evaluated_value == "float32"
    return isinstance(dtype, cst.Attribute) and dtype.attr.value == "float32"


def _root(node, parents, op: str, grow: bool = False):
    """Where the island ends, and whether the code around it already wants float32 (a cast
    to float32: the island's float32 result goes in as it is, no cast back). See the module
    docstring; ``grow``: the run showed this op overflow (a quotient), so it grows like an overflowing op."""
    if op not in OVERFLOWING and not grow:
        return node, False
    current, last_expr = node, node
    while True:
        parent = parents.get(current)
        if isinstance(parent, cst.Arg):
            call = parents.get(parent)
            if isinstance(call, cst.Call) and call.args and call.args[0] is parent and _casts_to_float32(call):
                # `tf.cast(reduce_mean(exp(x)), tf.float32)`: the user already leaves float16 here;
                # growing past the cast could only wrap it (and find no operand to cast).
                return current, True
        if parent is None or isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement,
                                                 cst.IndentedBlock, cst.Module, cst.Lambda)):
            return last_expr, False
        if isinstance(parent, cst.BaseExpression):
            last_expr = parent
            if _range_reducing(spelling(parent)):
                return parent, False
        current = parent


class _CastLeaves(cst.CSTTransformer):
    """Inside the island: cast each tensor operand to float32."""

    def __init__(self, style: CastStyle, float32_names: frozenset[str] = frozenset()) -> None:
        self.style = style
        # Names the island already made float32 (a statement before computed them).
        self.float32_names = float32_names
        self.first: cst.BaseExpression | None = None
        self.count = 0

    def _leaf(self, expr: cst.BaseExpression) -> cst.BaseExpression:
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.Imaginary)):
            return expr
        if isinstance(expr, cst.Name) and expr.value in self.float32_names:
            self.count += 1
            return expr
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.expression, (cst.Integer, cst.Float)):
            return expr
        if _math(expr):
            return self._inner(expr)
        if isinstance(expr, cst.UnaryOperation):
            return expr.with_changes(expression=self._leaf(expr.expression))
        if self.first is None and isinstance(expr, (cst.Name, cst.Attribute)):
            self.first = expr
        self.count += 1
        return self.style.cast(expr)

    def _inner(self, expr):
        if isinstance(expr, cst.BinaryOperation):
            return expr.with_changes(left=self._leaf(expr.left), right=self._leaf(expr.right))
        tensors = _math_spec(spelling(expr)).dtype_args  # axes, shapes and options are left as they are
        args = []
        for position, arg in enumerate(expr.args):
            if arg.keyword is None and arg.star == "" and position in tensors:
                args.append(arg.with_changes(value=self._leaf(arg.value)))
            else:
                args.append(arg)
        return expr.with_changes(args=args)

    def island(self, root: cst.BaseExpression) -> cst.BaseExpression:
        if _math(root):
            return self._inner(root)
        return self._leaf(root)


def float32_island(text: str, line: int, column: int, op: str, output: bool = False,
                   grow: bool = False) -> str | None:
    """``text`` with the ``op`` expression at ``line``:``column`` computed in float32 and cast back, or None.
    ``output``: only where an overflowing op's island, with nothing bringing it back in range, is the value a
    layer's ``call`` returns, and then with no cast back: the output stays float32, as under a float32 output
    layer (``return exp(log_rate)`` past 65504, which a cast back would make inf again). ``grow``: grown as an
    overflowing op's island is, for an op the run showed overflow though its kind need not (``DIVIDING``)."""
    try:
        return _float32_island(text, line, column, op, output, grow)
    except RecursionError:  # a chain the parse allows but metadata/code generation cannot recurse through
        return None


def _returned_by_call(node, parents) -> bool:
    """Whether ``node`` is the value of a ``return`` directly in a ``call(self, ...)`` method."""
    statement = parents.get(node)
    if not isinstance(statement, cst.Return):
        return False
    current = parents.get(statement)
    while current is not None and not isinstance(current, cst.FunctionDef):
        current = parents.get(current)
    return current is not None and current.name.value == "call" and in_method(statement, parents)


def _float32_island(text: str, line: int, column: int, op: str, output: bool = False,
                    grow: bool = False) -> str | None:
    module = parsed(text)
    if module is None:
        return None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    node = _find(wrapper, line, column, op)
    if node is None:
        return None
    parents = wrapper.resolve(ParentNodeProvider)
    root, into_float32 = _root(node, parents, op, grow)
    overflowing = op in OVERFLOWING or grow
    style = CastStyle(module)
    caster = _CastLeaves(style)
    computed = caster.island(root)
    if caster.count == 0:
        return None
    if output and (not overflowing or _range_reducing(spelling(root))
                   or not _returned_by_call(root, parents)):
        return None  # a value back in range (or not an overflow) is cast back as usual
    if into_float32 or output:
        back = None
    elif in_method(root, parents):
        back = cst.parse_expression("self.compute_dtype")
    elif caster.first is not None:
        back = cst.Attribute(value=caster.first, attr=cst.Name("dtype"))
    else:
        return None
    later = _later_reducer(root, parents) if back is not None and overflowing else None
    if later is not None:
        # `scores = matmul(q, k^T)` then `weights = softmax(scores)`: scores stay float32 between
        # the two statements, and the cast back comes after the softmax.
        name, reducer = later
        replacements = {root: computed}
        if reducer is not None:
            again = _CastLeaves(style, frozenset({name}))
            replacements[reducer] = _parenthesised(reducer, style.cast(again.island(reducer), back), parents)
    else:
        new = computed if back is None else style.cast(computed, back)
        replacements = {root: _parenthesised(root, new, parents)}
    result = module.visit(Replace(replacements)).code
    return result if result != text else None


def _parenthesised(old, new, parents):
    if isinstance(old, cst.BinaryOperation) or isinstance(parents.get(old), cst.BinaryOperation):
        return new.with_changes(lpar=old.lpar, rpar=old.rpar) if old.lpar else new
    return new


def _dtype_read(name, parents) -> bool:
    parent = parents.get(name)
    return isinstance(parent, cst.Attribute) and parent.value is name and parent.attr.value == "dtype"


def _statement(node, parents):
    while node is not None and not isinstance(node, cst.SimpleStatementLine):
        node = parents.get(node)
    return node


class _Names(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name, self.found = name, []

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self.found.append(node)


def _later_reducer(root, parents):
    """``(name, call)`` when ``root`` is the whole value of ``name = ...`` and ``name`` is read
    once more in its function, by a later plain statement of the same block, inside a call that
    brings values back into range (``_range_reducing``), or as the value a cast to
    float32 takes (``(name, None)``: nothing to change there); else None. A read of ``name.dtype`` in that
    same statement is no other read. Any other read (a second use, a loop, a nested function, a `self.name`
    attribute) leaves the island alone."""
    assign = parents.get(root)
    if not (isinstance(assign, cst.Assign) and assign.value is root and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)):
        return None
    target = assign.targets[0].target
    line, block = parents.get(assign), parents.get(parents.get(assign))
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    scope = block
    while scope is not None and not isinstance(scope, (cst.FunctionDef, cst.Module)):
        scope = parents.get(scope)
    if scope is None:
        return None
    names = _Names(target.value)
    scope.visit(names)
    uses = [n for n in names.found if n is not target]
    # `mean = summed / tf.cast(count, summed.dtype)`: a read of the name's dtype in the statement that reads its
    # value follows the island (float32 there too), so it is no second use.
    reads = [n for n in uses if not _dtype_read(n, parents)]
    if len(reads) != 1 or any(_statement(n, parents) is not _statement(reads[0], parents) for n in uses):
        return None
    uses = reads
    current, reducer, into_float32 = uses[0], None, False
    while True:
        parent = parents.get(current)
        if parent is None or isinstance(parent, (cst.Lambda, cst.BaseComp, cst.FunctionDef, cst.ClassDef,
                                                 cst.BaseCompoundStatement)):
            return None
        if isinstance(parent, cst.SimpleStatementLine):
            break
        if current is uses[0] and isinstance(parent, cst.Arg):
            call = parents.get(parent)
            # `tf.cast(reg, tf.float32)`: that statement wants the float32 value as it is.
            into_float32 = isinstance(call, cst.Call) and call.args[0] is parent and _casts_to_float32(call)
        if reducer is None and isinstance(parent, cst.BaseExpression) and _range_reducing(spelling(parent)):
            reducer = parent
        current = parent
    body = list(getattr(block, "body", ()))
    order = {id(stmt): k for k, stmt in enumerate(body)}
    if (reducer is None and not into_float32) or parents.get(parent) is not block \
            or order.get(id(parent), -1) <= order.get(id(line), -1):
        return None
    return target.value, None if into_float32 else reducer


def layer_float32(text: str, line: int, class_name: str | None = None) -> str | None:
    """``text`` with the layer built at ``line`` (``class_name``, or the one constructor there) given
    ``dtype="float32"``, or None."""
    try:
        return _layer_float32(text, line, class_name)
    except RecursionError:  # as in float32_island
        return None


def _layer_float32(text: str, line: int, class_name: str | None = None) -> str | None:
    module = parsed(text)
    if module is None:
        return None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = resolve_positions(wrapper)
    calls = [n for n, p in positions.items() if isinstance(n, cst.Call) and p.start.line == line]
    named = [c for c in calls if class_name and call_name(c) == class_name]
    if named:
        target = named[0]
    elif class_name:
        return None
    else:
        constructors = [c for c in calls if (call_name(c) or "")[:1].isupper()]
        if len(constructors) != 1:
            return None
        target = constructors[0]
    value = cst.SimpleString('"float32"')
    args = list(target.args)
    for k, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == "dtype":
            if isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value == "float32":
                return None
            args[k] = arg.with_changes(value=value)
            break
    else:
        if args and args[-1].star == "**":
            args.insert(len(args) - 1, cst.Arg(
                keyword=cst.Name("dtype"), value=value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        else:
            if args:
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(cst.Arg(keyword=cst.Name("dtype"), value=value,
                                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
    result = module.visit(Replace({target: target.with_changes(args=args)})).code
    return result if result != text else None
