"""MP203: sums of squares, norms and variances over float16 activations that overflow."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import cast, first_arg, is_simple, number
from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.distributions import distribution
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.base import Fact, FixAvailability, Invalid, Need, Rule, Valid
from mpfix.codemods.facts import keras_layers, ops as op_table
from mpfix.codemods.facts.dtype_facts import DtypeFacts, RegionKind, dtype_facts
from mpfix.codemods.facts.heuristics import LOSS_NAME
from mpfix.codemods.names import self_attribute
from mpfix.findings import FixSafety

Kind = op_table.Kind
# The `ord` values of a norm that sum squares: the Euclidean/Frobenius norm (the default). An L1,
# inf/max or nuclear norm sums magnitudes or takes a maximum, and does not square.
_SQUARING_ORDS = {"None", "2", "2.0", "'euclidean'", '"euclidean"', "'fro'", '"fro"'}


def _squaring_norm(context, call: cst.Call) -> bool:
    """Whether a norm call's ``ord`` (second positional argument or keyword) is the Euclidean one.

    An ``ord`` that is not a literal (a variable, ``np.inf``, ``float("inf")``) is not known to
    square, so it is not reported.
    """
    positional = [a for a in call.args if a.keyword is None and not a.star]
    ord_arg = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "ord"), None)
    if ord_arg is None and len(positional) >= 2:
        ord_arg = positional[1].value
    if ord_arg is None:
        return not any(a.star for a in call.args)
    return context.code(ord_arg).strip() in _SQUARING_ORDS


def _self_product(context, call: cst.Call, spec: op_table.OpSpec) -> cst.BaseExpression | None:
    """``x`` of ``einsum("bd,bd->b", x, x)`` or ``matmul(x, x, transpose_b=True)``: squares summed."""
    operands = [a.value for a in call.args if a.keyword is None and not a.star]
    if spec.short == "einsum":
        if len(operands) != 3 or not isinstance(operands[0], cst.SimpleString):
            return None
        equation = (operands[0].evaluated_value or "").replace(" ", "")
        inputs, _, output = equation.partition("->")
        if not output and "->" not in equation:
            return None
        contracted = set(inputs.replace(",", "").replace(".", "")) - set(output)
        a, b = operands[1], operands[2]
        return a if contracted and context.code(a) == context.code(b) else None
    # matmul(x, x, transpose_b=True) is not one: with a last axis of 1 it is an outer product (a mask's
    # pairwise mask in research/seq_flow_lite), and the shapes are not in the source.
    return None


def _attention_scores(context, call: cst.Call, spec: op_table.OpSpec) -> bool:
    """``matmul(q, k, transpose_b=True)`` or ``einsum("...qd,...kd->...qk", q, k)``: query·key over features."""
    operands = [a.value for a in call.args if a.keyword is None and not a.star]
    if spec.short == "einsum":
        if len(operands) != 3 or not isinstance(operands[0], cst.SimpleString):
            return False
        inputs, _, output = (operands[0].evaluated_value or "").replace(" ", "").partition("->")
        parts = inputs.split(",")
        return len(parts) == 2 and all(parts) and parts[0][-1] == parts[1][-1] and parts[0][-1] not in output \
            and context.code(operands[1]) != context.code(operands[2])
    if len(operands) != 2:
        return False
    keys = _transposed_key(context, operands[1])
    if keys is not None:  # matmul(q, transpose(k, (0, 1, 3, 2))): the transpose spelled as an op
        return context.code(operands[0]) != context.code(keys)
    return context.code(operands[0]) != context.code(operands[1]) and any(
        a.keyword is not None and a.keyword.value in ("transpose_b", "adjoint_b") and isinstance(a.value, cst.Name)
        and a.value.value == "True" for a in call.args)


def _transposed_key(context, node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``transpose(k, (0, 1, 3, 2))`` (a literal permutation swapping the last two axes only): ``k``."""
    if not isinstance(node, cst.Call):
        return None
    spec = op_table.known(context.resolve(node.func))
    positional = [a.value for a in node.args if a.keyword is None and not a.star]
    perm = next((a.value for a in node.args if a.keyword is not None and a.keyword.value in ("perm", "axes")),
                positional[1] if len(positional) > 1 else None)
    if spec is None or spec.short != "transpose" or not positional or not isinstance(perm, (cst.Tuple, cst.List)):
        return None
    axes = [number(e.value) for e in perm.elements]
    n = len(axes)
    swapped = list(range(n - 2)) + [n - 1, n - 2]
    return positional[0] if n >= 2 and axes == swapped else None


def _from_weight(facts: DtypeFacts, context, node: cst.BaseExpression, depth: int = 0) -> bool:
    """``node`` is computed from one layer weight alone (``tf.linalg.inv(self.precision_matrix)`` with
    ``self.precision_matrix = self.add_weight(...)``), through names bound once and one-tensor ops."""
    if depth > 8:
        return False
    if isinstance(node, cst.Name):
        value = facts.value_of(node)
        return value is not None and _from_weight(facts, context, value, depth + 1)
    if isinstance(node, cst.Call):
        first = first_arg(node)
        resolved = context.resolve(node.func)
        if op_table.lookup(resolved) is None or first is None or \
                len([a for a in node.args if a.keyword is None and not a.star]) > 1:
            return False  # not a one-tensor TF op (inv, transpose, cast, reshape's shape is a keyword or a list)
        return _from_weight(facts, context, first, depth + 1)
    if self_attribute(node) is not None:
        place = facts.place(node)
        method = place.function if place is not None and place.in_class else None
        cls = next((c for c in walk(facts.module) if isinstance(c, cst.ClassDef) and method is not None
                    and any(s is method for s in c.body.body)), None)
        return cls is not None and _weight_attribute(context, cls, node.attr.value)
    return False


def _along_an_axis(call: cst.Call, spec: op_table.OpSpec) -> bool:
    """The reduction names an axis (``axis=0``; a ``reduce_*``'s second positional argument; a norm's second is
    its ``ord``): it sums one row or column of a weight, not the whole tensor."""
    axis = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "axis"), None)
    if axis is not None:
        return not (isinstance(axis, cst.Name) and axis.value == "None")
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    return not spec.has(Kind.NORM) and len(positional) >= 2 and not (
        isinstance(positional[1], cst.Name) and positional[1].value == "None")


def _weight_attribute(context, cls: cst.ClassDef, attr: str) -> bool:
    """Every ``self.<attr> = ...`` in the class builds a weight (``self.add_weight``, ``tf.Variable``)."""
    values = []
    for node in walk(cls):
        if isinstance(node, cst.Assign) and any(self_attribute(t.target) == attr for t in node.targets):
            values.append(node.value)
    return bool(values) and all(_builds_weight(context, v) for v in values)


def _builds_weight(context, value: cst.BaseExpression) -> bool:
    if not isinstance(value, cst.Call):
        return False
    if isinstance(value.func, cst.Attribute) and value.func.attr.value in keras_layers.WEIGHT_BUILDERS:
        return True
    spec = op_table.known(context.resolve(value.func))
    return spec is not None and spec.name == "Variable"


def _is_loss(facts: DtypeFacts, call: cst.Call, code) -> bool:
    """The reduction's result is a loss term: it may stay float32 (losses are float32 in Keras)."""
    for ancestor in facts.ancestors(call):
        if isinstance(ancestor, cst.Call) and isinstance(ancestor.func, cst.Attribute) and ancestor.func.attr.value == "add_loss":
            return True
        if isinstance(ancestor, cst.Assign):
            return any(LOSS_NAME.search(code(t.target)) for t in ancestor.targets)
        if isinstance(ancestor, (cst.AugAssign, cst.AnnAssign)):
            return bool(LOSS_NAME.search(code(ancestor.target)))
        if isinstance(ancestor, cst.Return):
            place = facts.place(call)
            return place is not None and place.kind is RegionKind.LOSS
        if isinstance(ancestor, cst.BinaryOperation) and any(
                LOSS_NAME.search(n.value) for n in (ancestor.left, ancestor.right) if isinstance(n, cst.Name)):
            return True
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.FunctionDef)):
            return False
    return False


class Float16UnsafeReduction(Rule):
    code = "MP203"
    name = "float16-unsafe-reduction"
    uses = frozenset({Fact.DTYPES})
    message = "Sum of squares over float16 activations overflows past 65504; compute it in float32"
    messages = {
        "attention": ("attention scores `{product}` sum products of float16 activations and overflow past 65504 before "
                      "the scaling; scale the queries first"),
        "overflow": "float16 {reduction} of `{target}` overflows past 65504; compute it in float32",
        "underflow": ("float16 {reduction} of the probabilities `{target}` underflows to 0 below 6e-8 (25 halvings), and "
                      "a log or division of it is -inf/inf; compute it in float32 (or sum their logs)"),
        "overflow_keep_float32": ("float16 {reduction} of `{target}` overflows past 65504; compute it in float32 "
                                  "and keep it float32 until a sqrt/rsqrt brings it back in range"),
        "overflow_cast_back": ("float16 {reduction} of `{target}` overflows past 65504; compute it in float32 and cast "
                               "the result back"),
        "running_total": ("`{variable}` is a running total kept across calls and read as float16 inside `call` (layer "
                          "weights are autocast): `{update}` is rounded to float16, where adding 1 stops at 2048 and "
                          "past 65504 it is inf; create the weight with `{argument}` and update it in float32"),
        "cancellation": ("float16 variance `{variance}` (mean of squares minus squared mean) cancels: both terms are "
                         "rounded to float16's spacing (32 near 30000), so the difference is coarse and can be negative "
                         "(sqrt/rsqrt of it NaN); centre first (mean of `square(x - mean)`) or compute it in float32"),
    }
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.SOMETIMES
    requires_float16 = True
    needs = frozenset({Need.FLOAT16_REGION})  # reports only in a float16 dtype region (the parse gate)
    # Substrings, and regexes that start with a literal (a leading \b makes re try every position).
    triggers = ("l2_loss", "squared_difference", "reduce_variance", "reduce_std", ".var(", ".std(",
                re.compile(r"square(?<!\wsquare)\s*\("),
                re.compile(r"norm(?<!\wnorm)\s*\("), re.compile(r"\*\*\s*2\b"), re.compile(r"sum(?<![a-z]sum)\s*\("),
                "reduce_mean",
                ".assign(",  # a layer weight's running total (self.count.assign(self.count + n))
                "cumsum(", "prod(", "einsum(", "matmul(", "euclidean_norm(", "tensordot(", re.compile(r"dot(?<!\wdot)\s*\("))
    explanation = """
        ## What it does
        Finds `tf.nn.l2_loss`, sums of squares in every spelling (`tf.reduce_sum(tf.square(x))`,
        `tf.pow(x, 2)`, `x ** 2`, `x * x`, and einsum self-products `tf.einsum("bd,bd->b", x, x)`),
        means of squares (`tf.reduce_mean(tf.square(x))`: TensorFlow's float16 mean sums in float16
        first; `keras.ops.mean` sums in float32) and
        variances written by hand (`tf.reduce_mean(tf.square(x - mean))`),
        `tf.norm` (the Euclidean or Frobenius norm: an L1 or inf norm does not square),
        `tf.math.reduce_variance` and `tf.math.reduce_std` over tensors that are float16 under
        `mixed_float16` (activations inside `call`, model outputs in a training step); running
        sums (`tf.cumsum`); attention scores scaled only after the product
        (`tf.matmul(q, k, transpose_b=True) / math.sqrt(d)`: scale `q` first); and products of
        float16 probabilities (`tf.math.cumprod(1.0 - hazard)`, `reduce_prod`, `keras.ops.cumprod`),
        which underflow to 0 (25 halvings are below float16's smallest subnormal, ≈ 6e-8): a
        survival curve over 120 bins is 0 and its log `-inf`. Products are reported without a fix,
        and so are one-pass variances `mean(x²) - mean(x)²` of float16 activations: the two moments
        carry float16's spacing (32 near 30,000), so their difference is coarse and can be negative.
        Running totals kept in a layer's weights (`self.count.assign(self.count + n)`, n ≥ 0) are
        reported too, without a fix: inside `call` a weight is read as float16 (autocast), so a
        total that only grows across calls passes 65504 (inf), and a step counter stops at 2048
        (2048 + 1 rounds to 2048; ran on Keras 3). Running means and moving averages are bounded.

        ## Why is this bad?
        Squares grow fast and float16 stops at 65504: 3,000 activations of magnitude 5 sum to
        75,000, which is `inf`. An activity regulariser `1e-4 * tf.nn.l2_loss(h)` makes the loss
        `inf` from the first step while the gradients stay finite, so the loss scale never
        reacts. Weights are float32 variables and are not flagged outside a layer's `call`; inside
        it, a weight's rows or columns (`ops.norm(self.w, axis=0)`, a cosine head) sum about
        fan-in times the initializer's variance and are not flagged either (its whole norm is).

        ## Example
        ```python
        loss = ce(y, logits) + 1e-4 * tf.nn.l2_loss(hidden)
        ```

        ## Use instead
        ```python
        loss = ce(y, logits) + 1e-4 * tf.nn.l2_loss(tf.cast(hidden, tf.float32))
        ```
        A result that is not a loss is cast back to the input's dtype once it is back in range
        (after a norm, or the `sqrt`/`rsqrt` that takes the sum): TensorFlow does not promote, and
        `float16 + float32` is an error, but a float32 sum cast back to float16 overflows all the
        same. Where the sum leaves the expression first (`energy = ...` on a line of its own), the
        finding comes without a fix.

        ## Fix safety
        Unsafe: the result's dtype changes for loss terms (float32, as Keras' losses are).
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            @tf.function
            def train_step(model, x, y):
                with tf.GradientTape() as tape:
                    logits = model(x)
                    loss = tf.reduce_mean(tf.square(y - logits))
                    loss += 1e-4 * tf.add_n([tf.nn.l2_loss(v) for v in model.trainable_variables])
                return loss
        """, policy="mixed_float16"),
        Valid("""
            import tensorflow as tf

            class Act(tf.keras.layers.Layer):
                def call(self, h):
                    self.add_loss(1e-4 * tf.nn.l2_loss(tf.cast(h, tf.float32)))
                    return h
        """, policy="mixed_float16"),
        Valid("""
            import tensorflow as tf

            class StickBreaking(tf.keras.layers.Layer):
                def call(self, logits):
                    v = tf.sigmoid(tf.cast(logits, tf.float32))
                    return v * tf.math.cumprod(1.0 - v, axis=-1, exclusive=True)
        """, policy="mixed_float16"),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            class Act(tf.keras.layers.Layer):
                def call(self, h):
                    self.add_loss(1e-4 * tf.nn.l2_loss(h))
                    return h
            """,
            """
            import tensorflow as tf

            class Act(tf.keras.layers.Layer):
                def call(self, h):
                    self.add_loss(1e-4 * tf.nn.l2_loss(tf.cast(h, tf.float32)))
                    return h
            """,
            policy="mixed_float16",
        ),
        # An RMS scale: the float32 sum stays float32 until rsqrt brings it back in range.
        Invalid(
            """
            import tensorflow as tf

            class Scale(tf.keras.layers.Layer):
                def call(self, x):
                    return x * tf.math.rsqrt(tf.reduce_sum(tf.square(x), axis=-1, keepdims=True) + 1.0)
            """,
            """
            import tensorflow as tf

            class Scale(tf.keras.layers.Layer):
                def call(self, x):
                    return x * tf.cast(tf.math.rsqrt(tf.reduce_sum(tf.square(tf.cast(x, tf.float32)), axis=-1, keepdims=True) + 1.0), x.dtype)
            """,
            policy="mixed_float16",
        ),
        # A backend-agnostic Keras 3 module gets keras.ops casts, on both operands of `x * x`.
        Invalid(
            """
            from keras import layers, ops

            class Scale(layers.Layer):
                def call(self, x):
                    return x / ops.sqrt(ops.sum(x * x, axis=-1, keepdims=True))
            """,
            """
            from keras import layers, ops

            class Scale(layers.Layer):
                def call(self, x):
                    return x / ops.cast(ops.sqrt(ops.sum(ops.cast(x, "float32") * ops.cast(x, "float32"), axis=-1, keepdims=True)), x.dtype)
            """,
            keras=3,
            policy="mixed_float16",
        ),
        # Attention scores scaled only after the product.
        Invalid(
            """
            import math
            import tensorflow as tf

            class SelfAttention(tf.keras.layers.Layer):
                def __init__(self, dim):
                    super().__init__()
                    self.dim = dim
                    self.qkv = tf.keras.layers.Dense(3 * dim)

                def call(self, x):
                    q, k, v = tf.split(self.qkv(x), 3, axis=-1)
                    scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(self.dim)
                    return tf.matmul(tf.nn.softmax(scores, axis=-1), v)
            """,
            """
            import math
            import tensorflow as tf

            class SelfAttention(tf.keras.layers.Layer):
                def __init__(self, dim):
                    super().__init__()
                    self.dim = dim
                    self.qkv = tf.keras.layers.Dense(3 * dim)

                def call(self, x):
                    q, k, v = tf.split(self.qkv(x), 3, axis=-1)
                    scores = tf.matmul(q / math.sqrt(self.dim), k, transpose_b=True)
                    return tf.matmul(tf.nn.softmax(scores, axis=-1), v)
            """,
            policy='mixed_float16',
        ),
        # A running sum of large float16 values: no fix here.
        Invalid(
            """
            import tensorflow as tf

            class Monotonic(tf.keras.layers.Layer):
                def call(self, p):
                    return tf.cumsum(p * 1000.0, axis=1)
            """,
            policy='mixed_float16',
        ),
        # A running product of float16 probabilities (stick breaking): no fix here.
        Invalid(
            """
            import tensorflow as tf

            class StickBreaking(tf.keras.layers.Layer):
                def call(self, logits):
                    v = tf.sigmoid(logits)
                    return v * tf.math.cumprod(1.0 - v, axis=-1, exclusive=True)
            """,
            policy='mixed_float16',
        ),
        # A one-pass variance (mean of squares minus squared mean): the two float16 moments cancel. No fix here.
        Invalid(
            """
            import keras
            from keras import ops

            class OnePassNorm(keras.layers.Layer):
                def call(self, x):
                    mean = ops.mean(x, axis=-1, keepdims=True)
                    variance = ops.mean(ops.square(x), axis=-1, keepdims=True) - ops.square(mean)
                    return (x - mean) * ops.rsqrt(variance + 1e-3)
            """,
            policy='mixed_float16',
        ),    # A weight that only grows across calls (a running count), read as float16 in call: no fix here.
        Invalid(
            """
            import keras

            class Counter(keras.layers.Layer):
                def build(self, input_shape):
                    self.seen = self.add_weight(shape=(), initializer="zeros", trainable=False)

                def call(self, x):
                    self.seen.assign(self.seen + keras.ops.cast(keras.ops.shape(x)[0], x.dtype))
                    return x
            """,
            policy='mixed_float16',
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        # tf_keras hands a compiled loss the model's outputs as they are: float16 without a float32 head.
        facts = dtype_facts(self.context).assuming(Dtype.FLOAT16)
        reported = self._cancellations(facts)
        for call in facts.nodes(cst.Call):
            spec = op_table.known(self.context.resolve(call.func))
            x = first_arg(call)
            if spec is None or x is None or call in reported:
                continue
            if spec.has(Kind.MATMUL):
                target = _self_product(self.context, call, spec)
                if target is not None and facts.dtype_of(target) is Dtype.FLOAT16:
                    self._report(facts, call, target, call, "sum of squares (a self-product)", in_range=False)
                continue
            if spec.has(Kind.NORM) and spec.short != "reduce_euclidean_norm" and not _squaring_norm(self.context, call):
                continue  # an L1/inf/max norm: no squares to overflow
            in_range = spec.has(Kind.NORM, Kind.DEVIATION, Kind.VARIANCE)
            what = spec.label if in_range or spec.has(Kind.SQUARED_SUM) else None
            target, replaced = x, None
            if spec.has(Kind.PRODUCT):
                self._product(facts, call, spec, x)
                continue
            if what is None and spec.has(Kind.DATA_LENGTH):
                # As many terms as the data has (a sequence, a node's in-edges): long whatever the model's widths.
                if spec.has(Kind.CUMULATIVE) and (facts.at_most_one(x) or facts.nonpositive(x) or
                                                  distribution(self.context, facts, x)):
                    continue  # a running sum of probabilities, or of logs ≤ 0 headed for exp (C25)
                ones = op_table.known(self.context.resolve(x.func)) if isinstance(x, cst.Call) else None
                if ones is not None and ones.has(Kind.ONES):
                    continue  # a count (a segment sum of ones): exact to 2048, past 65504 only with that many rows
                what = spec.label or "running sum (cumsum)"
            elif what is None and spec.has(Kind.LONG_SUM):
                square = self._square(facts, x)
                if square is not None:
                    target, replaced = square
                    what = "sum of squares"
            elif what is None and spec.has(Kind.LONG_MEAN):
                # tf.reduce_mean sums its axis in float16 (op table): a mean of squares overflows as their sum
                # does, and centred it is a variance, as `reduce_variance` is (reported in range alike). A mean
                # sums in float32 on GPUs, where only squares past 256 overflow: the float16 must be certain, a
                # layer's activations or the output of a model built here (not a training step's guess).
                square = self._square(facts, x)
                place = facts.place(call)
                if square is not None and not facts.probability(square[0]) and place is not None and \
                        (place.layer_method or facts.model_output(square[0]) is not None):
                    target, replaced = square
                    in_range = facts.centred(target)
                    what = "variance" if in_range else "mean of squares"
            if what is None or facts.dtype_of(target) is not Dtype.FLOAT16:
                continue
            if _along_an_axis(call, spec) and _from_weight(facts, self.context, target):
                continue  # a weight's rows or columns: ~fan-in x its initializer's variance, not activations
            self._report(facts, call, target, replaced, what, in_range=in_range)
        for binop in facts.nodes(cst.BinaryOperation):
            self._scaled_after_product(facts, binop)
        self._running_totals(facts)

    def _running_totals(self, facts: DtypeFacts) -> None:
        """``self.v.assign(self.v + n)`` in a layer method, n ≥ 0: a weight that only grows across calls (a count,
        a sum of squares). Read in ``call`` it is autocast to float16, so past 65504 it is inf (wave 11's Welford
        normaliser). A running mean (an increment of either sign) or an EMA (``v * m + ...``) is bounded: silent.
        No fix: the weight's creation (``autocast=False``) and every read of it change."""
        for call in facts.nodes(cst.Call):
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "assign" and
                    self_attribute(func.value) is not None) or first_arg(call) is None:
                continue
            place = facts.place(call)
            if place is None or not place.layer_method:
                continue
            variable = self.context.code(func.value)
            value = self._bound(facts, first_arg(call))
            for binop in walk(value):
                if not (isinstance(binop, cst.BinaryOperation) and isinstance(binop.operator, cst.Add)):
                    continue
                operands = [binop.left, binop.right]
                own = [o for o in operands if self.context.code(o) == variable]
                if len(own) == 1 and facts.nonnegative(operands[1 - operands.index(own[0])]) and \
                        facts.dtype_of(own[0]) is Dtype.FLOAT16 and facts.dtype_of(binop) is Dtype.FLOAT16:
                    argument = "autocast=False" if self.context.keras == 3 else "experimental_autocast=False"
                    self.report(binop, "running_total", variable=variable, update=self.context.code(binop),
                                argument=argument)
                    break

    def _cancellations(self, facts: DtypeFacts) -> set[cst.Call]:
        """``mean(x²) - mean(x)²`` on float16 x: a one-pass variance. Both moments are ~mean² and carry float16's
        spacing there (32 near 30000: raw readings ~180), so their difference is a multiple of it and can be
        negative (wave 11's one-pass layer norm: rsqrt NaN). No fix: the centred form needs the mean's axes. The
        means of squares reported here are not reported again as an overflow (returned)."""
        done: set[cst.Call] = set()
        for binop in facts.nodes(cst.BinaryOperation):
            if not isinstance(binop.operator, cst.Subtract):
                continue
            moment = self._mean_of(facts, binop.left, squared=True)
            square = self._square(facts, self._bound(facts, binop.right))
            mean = self._mean_of(facts, square[0], squared=False) if square is not None else None
            if moment is None or mean is None or self.context.code(moment[1]) != self.context.code(mean[1]) or \
                    facts.dtype_of(moment[1]) is not Dtype.FLOAT16:
                continue
            done.add(moment[0])
            self.report(binop, "cancellation", variance=self.context.code(binop))
        return done

    def _bound(self, facts: DtypeFacts, node: cst.BaseExpression) -> cst.BaseExpression:
        """The value a local name is bound to (once), else the node itself."""
        value = facts.value_of(node) if isinstance(node, cst.Name) else None
        return value if value is not None else node

    def _mean_of(self, facts: DtypeFacts, node, squared: bool) -> tuple[cst.Call, cst.BaseExpression] | None:
        """``(mean call, x)`` when ``node`` is (a name bound to) a mean of x, or of x² when ``squared``."""
        node = self._bound(facts, node) if node is not None else None
        spec = op_table.known(self.context.resolve(node.func)) if isinstance(node, cst.Call) else None
        if spec is None or not spec.has(Kind.MEAN) or first_arg(node) is None:
            return None
        if not squared:
            return node, first_arg(node)
        square = self._square(facts, self._bound(facts, first_arg(node)))
        return (node, square[0]) if square is not None else None

    def _product(self, facts: DtypeFacts, call: cst.Call, spec: op_table.OpSpec, x: cst.BaseExpression) -> None:
        """A (running) product of float16 probabilities underflows to 0 (a survival curve ``cumprod(1 - hazard)``
        over 120 bins: 0.5 ** 25 is below float16's smallest subnormal). Reported where the float16 is certain (a
        layer's activations, the output of a model built here); no fix: where the float32 product goes next (a
        log, a division, float16 tensors it meets) decides how to write it."""
        place = facts.place(call)
        if place is None or facts.dtype_of(x) is not Dtype.FLOAT16 or not facts.unit_interval(x) or \
                not (place.layer_method or facts.model_output(x) is not None):
            return
        self.report(call, "underflow", reduction=spec.label, target=self.context.code(x))

    def _scaled_after_product(self, facts: DtypeFacts, binop: cst.BinaryOperation) -> None:
        """``matmul(q, k, transpose_b=True) / sqrt(d)``: d products summed in float16 before the scaling."""
        if isinstance(binop.operator, cst.Divide):
            product, scale = binop.left, binop.right
        elif isinstance(binop.operator, cst.Multiply):
            product, scale = (binop.left, binop.right) if isinstance(binop.left, cst.Call) else (binop.right, binop.left)
        else:
            return
        spec = op_table.known(self.context.resolve(product.func)) if isinstance(product, cst.Call) else None
        if spec is None or not spec.has(Kind.MATMUL) or not _attention_scores(self.context, product, spec):
            return
        operands = [a.value for a in product.args if a.keyword is None and not a.star]
        q, k = operands[-2], operands[-1]
        if facts.dtype_of(q) is not Dtype.FLOAT16 or facts.dtype_of(k) is not Dtype.FLOAT16 or \
                facts.dtype_of(scale) not in (Dtype.PYTHON, Dtype.FLOAT16):
            return
        if _from_weight(facts, self.context, q) or _from_weight(facts, self.context, k):
            return  # a weight times activations: a projection, not query-key scores (C41)
        fix = None
        if isinstance(q, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)):
            scaled = cst.BinaryOperation(left=q, operator=binop.operator, right=scale)
            args = [a.with_changes(value=scaled) if a.value is q else a for a in product.args]
            fix = {binop: product.with_changes(args=args, lpar=binop.lpar, rpar=binop.rpar)}
        self.report(binop, "attention", product=self.context.code(product),
                    fix=fix, description="Scale the queries before the product")

    def _square(self, facts: DtypeFacts, inner: cst.BaseExpression):
        """``(x, replaced)`` when ``inner`` is x²: ``square(x)``, ``pow(x, 2)``, ``x ** 2``, ``x * x``."""
        if isinstance(inner, cst.Call):
            spec = op_table.known(self.context.resolve(inner.func))
            if spec is not None and first_arg(inner) is not None:
                if spec.has(Kind.SQUARE):
                    return first_arg(inner), None
                if spec.has(Kind.POW) and len(inner.args) >= 2 and number(inner.args[1].value) == 2:
                    return first_arg(inner), None
            return None
        if isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Multiply) and \
                self.context.code(inner.left) == self.context.code(inner.right):
            return inner.left, inner  # x * x: both operands are cast
        if isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Power) and number(inner.right) == 2:
            return inner.left, None
        return None

    def _cast_in(self, call: cst.Call, target, replaced) -> tuple[cst.Call, tuple[str, ...]]:
        converted, imports = cast(self.context, target, "float32")
        if replaced is call:  # einsum(eq, x, x): every operand spelled like the target is cast
            code = self.context.code(target)
            args = [a.with_changes(value=cast(self.context, a.value, "float32")[0])
                    if a.keyword is None and self.context.code(a.value) == code else a for a in call.args]
            return call.with_changes(args=args), imports
        if replaced is not None:
            other, _ = cast(self.context, target, "float32")
            return call.deep_replace(replaced, replaced.with_changes(left=converted, right=other)), imports
        return call.deep_replace(target, converted), imports

    def _report(self, facts: DtypeFacts, call: cst.Call, target, replaced, what: str, in_range: bool) -> None:
        fields = {"reduction": what, "target": self.context.code(target)}
        if _is_loss(facts, call, self.context.code):
            new_call, imports = self._cast_in(call, target, replaced)
            self.report(call, "overflow", **fields, fix={call: new_call}, imports=imports,
                        description="Compute in float32")
            return
        place = facts.place(call)
        back = f"{self.context.code(target)}.dtype" if is_simple(target) else (
            "self.compute_dtype" if place.in_class and place.kind in (RegionKind.LAYER_CALL, RegionKind.HELPER) else None)
        # Casting back is effective only once the value is in range again: right after a norm or
        # standard deviation, or after the sqrt/rsqrt/log that takes the sum of squares (an
        # RMS norm's `rsqrt(sum + eps)`). Cast back before that and float16 overflows all the same.
        outer = call if in_range else self._shrinking_call(facts, call)
        if back is None or outer is None:
            self.report(call, "overflow_keep_float32", **fields)
            return
        new_call, imports = self._cast_in(call, target, replaced)
        new_outer = new_call if outer is call else outer.deep_replace(call, new_call)
        cast_back, more = cast(self.context, new_outer, back)
        self.report(call, "overflow_cast_back", **fields, fix={outer: cast_back}, imports=(*imports, *more),
                    description="Compute in float32")

    def _shrinking_call(self, facts: DtypeFacts, call: cst.Call) -> cst.Call | None:
        """The sqrt/rsqrt/log in the same expression that takes ``call``'s result, with nothing float16 on the way."""
        current = call
        for ancestor in facts.ancestors(call):
            if isinstance(ancestor, cst.BinaryOperation):
                sibling = ancestor.right if ancestor.left is current else ancestor.left
                if facts.dtype_of(sibling) not in (Dtype.PYTHON, Dtype.FLOAT32):
                    return None
            elif isinstance(ancestor, cst.Call):
                spec = op_table.known(self.context.resolve(ancestor.func))
                if spec is not None and spec.has(Kind.SHRINKS) and first_arg(ancestor) is current:
                    return ancestor
                return None
            elif isinstance(ancestor, cst.Arg):
                continue  # the call's argument: `current` stays the value passed
            elif not isinstance(ancestor, cst.UnaryOperation):
                return None
            current = ancestor
        return None
