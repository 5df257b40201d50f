"""MP204: exp/pow of float16 tensors that overflow (exp(x) is inf from x ≈ 11.1)."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import (
    argument, backend_agnostic, first_arg, folded, number, ops_spelling, reaching_value, tf_spelling,
)
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.base import Fact, FixAvailability, Invalid, Need, Rule, Valid
from mpfix.codemods.facts import ops as op_table
from mpfix.codemods.facts.dtype_facts import DtypeFacts, RegionKind, dtype_facts
from mpfix.codemods.facts.heuristics import SQUARED_DISTANCE
from mpfix.findings import FixSafety

Kind = op_table.Kind


def _spec(context, node: cst.BaseExpression) -> op_table.OpSpec | None:
    return op_table.known(context.resolve(node.func)) if isinstance(node, cst.Call) else None


def _is(context, node: cst.BaseExpression, *kinds: Kind) -> bool:
    spec = _spec(context, node)
    return spec is not None and spec.has(*kinds)


def _stable_exp_argument(context, node: cst.BaseExpression) -> bool:
    """exp(x - max(x)), exp(-|x|), exp(log_softmax(x)): ≤ 1, cannot overflow."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract):
        right = node.right
        while _is(context, right, Kind.STOP_GRADIENT) and right.args:
            right = right.args[0].value
        if _is(context, right, Kind.MAX) or _is(context, right, Kind.LOGSUMEXP):
            return True
        if _has_log_sigmoid_term(context, node.right):
            # Focal-loss modulator (1 - p_t)^γ = exp(-γ·z·x - γ·log1p(exp(-x))): for labels z in {0, 1}
            # the argument is -γ·log(1 + exp(±x)) ≤ 0 (tf-models' legacy detection losses).
            return True
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Call):
        spec = _spec(context, node.expression)
        return spec is not None and spec.range is op_table.Range.NONNEGATIVE and spec.result is op_table.Result.PRESERVES
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Divide, cst.Multiply)) and \
            isinstance(node.left, cst.UnaryOperation) and isinstance(node.left.operator, cst.Minus):
        # exp(-d² / (2σ²)): a Gaussian, bounded by 1.
        return bool(SQUARED_DISTANCE.search(context.code(node.left)))
    return _is(context, node, Kind.LOG_PROBABILITY)


def _exponents(context, facts: DtypeFacts, call: cst.Call, exponent: cst.BaseExpression,
               base: cst.BaseExpression) -> list[float]:
    """The values ``exponent`` takes: a literal, or (N13, N14) a hyper-parameter known by its default, ``self.power``
    bound from a constructor default or a ``power=3.`` parameter with what each call of this file passes instead.
    A hyper-parameter exponent counts only on activations: not in a loss (focal alpha/beta modulate terms in
    [0, 1]: tfm centernet_losses.py:76) and not on a base at most 1 (a sigmoid). Empty when unknown."""
    value = number(exponent)
    if value is not None:
        return [value]
    place = facts.place(call)
    if place is None or place.kind in ("loss", "train-step") or facts.at_most_one(base):
        return []
    constant = facts.constant(exponent)
    if constant is not None:
        return [constant.value]
    initial = facts.initial_value(exponent)  # a learned exponent (GeM's p) starts at its initializer's value
    if initial is not None:
        return [initial]
    return _parameter_values(context, facts, place.function, exponent) if isinstance(exponent, cst.Name) else []


def _parameter_values(context, facts: DtypeFacts, function: cst.FunctionDef | None, name: cst.Name) -> list[float]:
    """``power`` of ``def gem(x, power=3.)`` never rebound: its default and the constants this file's calls of
    ``gem`` pass (``gem(x, power=self.power)`` with ``self.power`` a constructor default); empty if one is unknown."""
    if function is None or facts.values_of(name):
        return []
    params = [*function.params.posonly_params, *function.params.params]
    param = next((p for p in [*params, *function.params.kwonly_params] if p.name.value == name.value), None)
    default = number(param.default) if param is not None and param.default is not None else None
    if default is None:
        return []
    values = [default]
    position = params.index(param) if param in params else None
    method = bool(params) and params[0].name.value == "self"
    if method and position is not None:
        position -= 1
    for call in facts.all_calls:
        func = call.func
        if method:  # self.pool(x, power=...)
            if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"
                    and func.attr.value == function.name.value):
                continue
        elif not isinstance(func, cst.Name) or func.value != function.name.value:
            continue
        passed = argument(call, name.value, position)
        if passed is None:
            continue
        constant = facts.constant(passed.value)
        if constant is None:
            return []
        values.append(constant.value)
    return values


def _has_log_sigmoid_term(context, node: cst.BaseExpression) -> bool:
    """``node`` is ``k * log1p(exp(v))`` or ``k * softplus(v)``: a log(1 + e^v) term."""
    while isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        node = node.right if isinstance(node.right, cst.Call) else node.left
    if _is(context, node, Kind.SOFTPLUS):
        return True
    return _is(context, node, Kind.LOG1P) and _is(context, first_arg(node), Kind.EXP)


class Float16ExpOverflow(Rule):
    code = "MP204"
    name = "float16-exp-overflow"
    uses = frozenset({Fact.DTYPES})
    message = "`exp`/`pow` of a float16 tensor overflows (exp(x) is inf from x ≈ 11.1); use tf.nn.softmax or float32"
    messages = {
        "exp": ("`{op}` of a float16 tensor is inf from 11.1 up; cast the input to float32 and keep the result "
                "float32 until it is back in range"),
        "pow": "`pow` on float16 tensors overflows past 65504 (or underflows below 6e-8); compute it in float32",
        "softplus": ("`{expression}` is softplus spelled out: `exp` of a float16 tensor is inf from 11.1 up, and so is "
                     "the result; use `softplus`"),
        "log_probability": ("`{expression}`: a float16 probability below 6e-8 rounds to 0 and its log is -inf (NaN in "
                            "the loss); use `log_softmax`/`log_sigmoid`, or compute in float32"),
        "log_complement": ("`{expression}`: float16's spacing below 1 is 4.9e-4, so `{value}` above 0.99976 is 1.0 and the "
                           "log is -inf; compute `1 - {value}` in float32 (of a sigmoid: `log_sigmoid(-x)`)"),
        "log_narrowed": ("`{expression}` takes the log after narrowing `{value}` to float16: below 6e-8 it is 0 (past "
                         "65504 inf) and the log -inf; take the log in float32 and cast its result"),
        "log_sum_exp": ("`{expression}` is a log-sum-exp by hand: in float16 each `exp` underflows to 0 below -17.3, "
                        "and once all of them do the log is -inf; use `logsumexp` of log-weights + exponents, or "
                        "compute in float32"),
        "manual_softmax": ("manual softmax `exp(x) / reduce_sum(exp(x))` overflows in float16 once x > 11.1; use "
                           "`tf.nn.softmax`"),
    }
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.SOMETIMES
    requires_float16 = True
    needs = frozenset({Need.FLOAT16_REGION})  # reports only in a float16 dtype region (the parse gate)
    # Literal-led (a leading \b makes re try every position): exp(, expm1(, pow(, power(, log(, log1p(, log2(, log10( as
    # whole words.
    triggers = (re.compile(r"exp(?<!\wexp)(?:m1)?\s*\("), re.compile(r"pow(?<!\wpow)(?:er)?\s*\("),
                re.compile(r"log(?<!\wlog)(?:1p|2|10)?\s*\("))
    explanation = """
        ## What it does
        Finds `tf.exp`, `tf.math.expm1` and `tf.pow` on tensors that are float16 under
        `mixed_float16`, and manual softmaxes `tf.exp(x) / tf.reduce_sum(tf.exp(x), axis)`.
        Arguments that cannot exceed 0 (or 11) by their form — `exp(x - reduce_max(x))`,
        `exp(-abs(x))`, `exp(-x**2)`, `exp(-log(10000.0) * i / d)`, `exp(cumsum(log(p)))`,
        `exp(clip_by_value(s, -10.0, 10.0))`, `exp(-relu(s) * (t[1:] - t[:-1]))` with `t` an
        ascending `linspace`/`range`/`sort` (volume rendering's gaps between sample depths) — are
        left alone, and so are complex values and float32 ones. Also the log side of the same range: softplus spelled out
        (`log1p(exp(x))`, `log(1 + exp(x))`, inf once `exp` is) and `log` of a float16
        softmax/sigmoid output (a probability below 6e-8 rounds to 0, and its log is -inf), and
        a log-sum-exp written by hand, `log(reduce_sum(w * exp(-z**2 / 2)))`: exps that cannot
        overflow still underflow to 0 below -17.3, and the log of their sum is -inf (a Gaussian
        mixture's likelihood); `exp(x - reduce_max(x))` sums hold a 1 and are left alone. And
        `log(1 - v)` (`log1p(-v)`) of a float16 `v` in a layer's `call` (where Keras autocasts; a
        parameter elsewhere is float16 only by assumption): float16's spacing below 1 is 4.9e-4, so a
        `v` above 0.99976 (a sigmoid past logit 8.3, a diffusion schedule's `alpha_bar` near t = 0)
        is 1.0 and the log is -inf. And the log of a value narrowed to float16 first,
        `log(cast(p, x.dtype))` of a float32 (or integer, or unknown) `p`: below 6e-8 the cast
        makes it 0 (past 65504 inf) where the log of the float32 value is finite and small.

        ## Why is this bad?
        `exp(11.1)` already exceeds float16's 65504: a manual softmax turns into `inf / inf = NaN`
        as soon as a logit grows past 11 (NaN at step 43 in our Keras 3 reproduction; on Keras 2
        every step is skipped and training stalls with the loss scale pinned at 1).

        ## Example
        ```python
        probs = tf.exp(logits) / tf.reduce_sum(tf.exp(logits), axis=-1, keepdims=True)
        ```

        ## Use instead
        ```python
        probs = tf.nn.softmax(logits, axis=-1)
        ```
        `tf.nn.softmax` subtracts the maximum first and is stable in float16. For other `exp`
        uses, cast the input to float32 and keep the result float32 until it is back in range.

        ## Fix safety
        Unsafe: the manual softmax becomes `softmax`, `log(softmax(x))` becomes `log_softmax(x)` and
        `log1p(exp(x))` becomes `softplus(x)` (the same values where the original was finite), and
        `log(cast(p, dtype))` becomes `cast(log(cast(p, float32)), dtype)` (the same dtype; the same
        values where the narrowed one was finite); other
        uses are reported without a fix, since casting back to float16 would overflow again.
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            class Head(tf.keras.layers.Layer):
                def call(self, logits):
                    z = tf.exp(logits - tf.reduce_max(logits, axis=-1, keepdims=True))
                    return z / tf.reduce_sum(z, axis=-1, keepdims=True) + tf.exp(-tf.abs(logits))
        """, policy="mixed_float16"),
        Valid("""
            import tensorflow as tf

            class Head(tf.keras.layers.Layer):
                def call(self, log_var):
                    return tf.exp(0.5 * tf.cast(log_var, tf.float32))
        """, policy="mixed_float16"),
        # backend.floatx() is float32 under every mixed policy; metric functions get float32 inputs.
        Valid("""
            import tensorflow as tf
            from tensorflow.keras import backend

            def ragged_ok(row_lens, y_pred):
                return tf.math.reduce_variance(tf.cast(row_lens, backend.floatx())) + tf.reduce_sum(y_pred)

            def pearson_correlation(y_true, y_pred):
                return tf.math.reduce_std(y_true) * tf.math.reduce_std(y_pred)
        """, policy="mixed_float16"),
        # Volume rendering: the gaps between ascending sample depths are ≥ 0, so the exponent is ≤ 0.
        Valid("""
            import tensorflow as tf

            class Render(tf.keras.layers.Layer):
                def call(self, raw):
                    t = tf.cast(tf.linspace(2.0, 6.0, 65), raw.dtype)
                    dists = t[1:] - t[:-1]
                    return 1.0 - tf.exp(-tf.nn.relu(raw) * dists)
        """, policy="mixed_float16"),
        # Focal-loss modulator: the argument is -γ·log(1 + e^±x) ≤ 0 for labels in {0, 1}.
        Valid("""
            import tensorflow as tf

            def focal_loss(targets, logits, gamma=2.0):
                neg_logits = -1.0 * logits
                return tf.math.exp(gamma * targets * neg_logits - gamma * tf.math.softplus(neg_logits))
        """, policy="mixed_float16"),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            class Head(tf.keras.layers.Layer):
                def call(self, logits):
                    return tf.exp(logits) / tf.reduce_sum(tf.exp(logits), axis=-1, keepdims=True)
            """,
            """
            import tensorflow as tf

            class Head(tf.keras.layers.Layer):
                def call(self, logits):
                    return tf.nn.softmax(logits, axis=-1)
            """,
            policy="mixed_float16",
        ),
        Invalid(
            """
            import tensorflow as tf

            class Sampler(tf.keras.layers.Layer):
                def call(self, inputs):
                    mean, log_var = inputs
                    return mean + tf.exp(0.5 * log_var) * tf.random.normal(tf.shape(mean), dtype=mean.dtype)
            """,
            policy="mixed_float16",
        ),
        # A literal exponent above 2 grows the value.
        Invalid(
            """
            import tensorflow as tf

            class Cubic(tf.keras.layers.Layer):
                def call(self, x):
                    return tf.pow(x, 3)
            """,
            policy='mixed_float16',
        ),
        # Softplus spelled out.
        Invalid(
            """
            import tensorflow as tf

            class Softplus(tf.keras.layers.Layer):
                def call(self, x):
                    return tf.math.log(1.0 + tf.exp(x))
            """,
            """
            import tensorflow as tf

            class Softplus(tf.keras.layers.Layer):
                def call(self, x):
                    return tf.math.softplus(x)
            """,
            policy='mixed_float16',
        ),
        # The log of a float32 probability narrowed to float16 first (a logQ correction): the log goes before the cast.
        Invalid(
            """
            import tensorflow as tf

            class LogQCorrection(tf.keras.layers.Layer):
                def __init__(self, item_probability, **kwargs):
                    super().__init__(**kwargs)
                    self.item_probability = tf.constant(item_probability, tf.float32)

                def call(self, logits, item_ids):
                    q = tf.gather(self.item_probability, item_ids)
                    return logits - tf.math.log(tf.cast(q, logits.dtype))
            """,
            """
            import tensorflow as tf

            class LogQCorrection(tf.keras.layers.Layer):
                def __init__(self, item_probability, **kwargs):
                    super().__init__(**kwargs)
                    self.item_probability = tf.constant(item_probability, tf.float32)

                def call(self, logits, item_ids):
                    q = tf.gather(self.item_probability, item_ids)
                    return logits - tf.cast(tf.math.log(q), logits.dtype)
            """,
            policy='mixed_float16',
        ),
        # A log-sum-exp by hand (a Gaussian mixture's likelihood): the exps cannot overflow, but all underflow. No fix.
        Invalid(
            """
            import tensorflow as tf

            class MixtureLikelihood(tf.keras.layers.Layer):
                def call(self, z):
                    density = tf.exp(-0.5 * tf.square(z))
                    return tf.math.log(tf.reduce_mean(density, axis=-1))
            """,
            policy='mixed_float16',
        ),
        # log(1 - v) of a float16 v: v above 0.99976 rounds to 1. No fix.
        Invalid(
            """
            import tensorflow as tf

            class Logit(tf.keras.layers.Layer):
                def call(self, alpha_bar):
                    return tf.math.log(alpha_bar) - tf.math.log(1.0 - alpha_bar)
            """,
            policy='mixed_float16',
        ),
        # The log of a float16 probability reached through a name: no fix.
        Invalid(
            """
            import tensorflow as tf

            class Head(tf.keras.layers.Layer):
                def call(self, logits, labels):
                    probs = tf.nn.sigmoid(logits)
                    return -labels * tf.math.log(probs)
            """,
            policy='mixed_float16',
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        # tf_keras hands a compiled loss the model's outputs as they are: float16 without a float32 head.
        base = dtype_facts(self.context)
        facts = base.assuming(Dtype.FLOAT16)
        self._fold_cache: dict = {}  # statement positions and module values, kept for this file's folding
        handled: set[cst.CSTNode] = set()
        for div in facts.nodes(cst.BinaryOperation):
            if isinstance(div.operator, cst.Divide):
                self._manual_softmax(facts, div, handled)
        for call in facts.nodes(cst.Call):
            if call in handled:
                continue
            spec = _spec(self.context, call)
            x = first_arg(call)
            if spec is None or x is None:
                continue
            if spec.has(Kind.LOG):
                complement = self._complement(base, spec, x)
                if complement is not None:
                    self.report(call, "log_complement", expression=self.context.code(call),
                                value=self.context.code(complement))
                    continue
                if self._log_of_exp(facts, call, spec, x, handled) or spec.has(Kind.LOG1P) or \
                        self._log_of_narrowed(base, call, x) or facts.dtype_of(x) is not Dtype.FLOAT16:
                    continue
                if facts.probability(x):
                    self._log_of_probability(call, x, natural=spec.has(Kind.NATURAL_LOG))
                elif self._sum_of_exps(facts, x):
                    self.report(call, "log_sum_exp", expression=self.context.code(call))
            elif spec.has(Kind.EXP):
                if self._bounded(facts, x):
                    continue
                self.report(call, "exp", op=self.context.code(call.func))
            elif spec.has(Kind.POW) and len(call.args) >= 2:
                # Only literal exponents say the result grows: pow(1 - p, gamma) (focal losses) and
                # pow(10000., i / d) (positional encodings) stay in range, and were most of the
                # tf-models findings when every pow was flagged.
                exponents = _exponents(self.context, facts, call, call.args[1].value, x)
                if not exponents or any(0 <= e <= 2 for e in exponents) or facts.dtype_of(x) is not Dtype.FLOAT16:
                    continue
                self.report(call, "pow")

    def _log_of_exp(self, facts: DtypeFacts, call: cst.Call, spec: op_table.OpSpec, x: cst.BaseExpression,
                    handled: set) -> bool:
        """``log1p(exp(v))`` or ``log(1 + exp(v))``: softplus spelled out, inf once exp(v) is (v > 11.1)."""
        if not spec.has(Kind.NATURAL_LOG):
            return False  # log2/log10: not softplus
        inner = x
        if not spec.has(Kind.LOG1P):
            if not (isinstance(x, cst.BinaryOperation) and isinstance(x.operator, cst.Add)):
                return False
            one, inner = (x.left, x.right) if number(x.left) == 1 else (x.right, x.left)
            if number(one) != 1:
                return False
        exp = _spec(self.context, inner)
        v = first_arg(inner) if exp is not None and exp.has(Kind.EXP) and not exp.has(Kind.EXPM1) else None
        if v is None or self._bounded(facts, v):
            return False
        handled.add(inner)
        if backend_agnostic(self.context):
            spelled, imports = ops_spelling(self.context)
            template = cst.parse_expression(f"{spelled}.softplus(__x__)")
        else:
            tf, imports = tf_spelling(self.context)
            template = cst.parse_expression(f"{tf}.math.softplus(__x__)")
        fix = {call: template.with_changes(lpar=call.lpar, rpar=call.rpar,
                                           args=[template.args[0].with_changes(value=v)])}
        self.report(call, "softplus", expression=self.context.code(call), fix=fix, imports=imports,
                    description="Use softplus")
        return True

    def _log_of_narrowed(self, facts: DtypeFacts, call: cst.Call, x: cst.BaseExpression) -> bool:
        """``log(cast(p, dtype))`` with the cast's result float16 and ``p`` float32 (or a train step's batch data):
        the cast narrows p, so a p below 6e-8 is 0 and the log -inf (wave 13's logQ correction of sampling
        probabilities ~1e-9). Any positive float32 has a log within ±104, which float16 holds: the log first, then
        the cast, is the same dtype and never worse (p cast to float32 first unless it is float32 or float64)."""
        if not isinstance(x, cst.Call):
            return False
        spec = _spec(self.context, x)
        source = first_arg(x)
        if spec is None or not spec.is_cast or source is None or len(x.args) < 2 or x.args[0].keyword is not None or \
                call.args[0].value is not x or self._cast_target(facts, x) is not Dtype.FLOAT16 or \
                not (facts.dtype_of(source) in (Dtype.FLOAT32, Dtype.FLOAT64) or self._batch_data(facts, source)):
            return False  # an integer (a shape, a count: exact to 2048, inf only past 65504) or a float16 value
        imports: tuple[str, ...] = ()
        inner = source
        if facts.dtype_of(source) not in (Dtype.FLOAT32, Dtype.FLOAT64):
            if op_table.namespace(self.context.resolve(x.func)) is op_table.Namespace.TENSORFLOW:
                tf, imports = tf_spelling(self.context)
                float32 = cst.parse_expression(f"{tf}.float32")
            else:
                float32 = cst.SimpleString('"float32"')
            inner = x.with_changes(args=[x.args[0], cst.Arg(value=float32)], lpar=[], rpar=[])
        log = call.with_changes(args=[call.args[0].with_changes(value=inner), *call.args[1:]], lpar=[], rpar=[])
        fix = {call: x.with_changes(args=[x.args[0].with_changes(value=log), *x.args[1:]],
                                    lpar=call.lpar, rpar=call.rpar)}
        self.report(call, "log_narrowed", expression=self.context.code(call), value=self.context.code(source),
                    fix=fix, imports=imports, description="Take the log before the cast")
        return True

    @staticmethod
    def _cast_target(facts: DtypeFacts, cast: cst.Call) -> Dtype:
        """The dtype a cast makes. ``x.dtype`` of a name rebound only by augmented assignments (``logits -= v``) is
        the dtype of its plain assignments: a tensor's ``-=`` keeps its dtype (TensorFlow refuses to mix)."""
        made = facts.dtype_of(cast)
        spelled = cast.args[1].value if cast.args[1].keyword is None else None
        if made is not Dtype.UNKNOWN or not (isinstance(spelled, cst.Attribute) and spelled.attr.value == "dtype"
                                             and isinstance(spelled.value, cst.Name)):
            return made
        dtypes = {facts.dtype_of(v) for v in facts.values_of(spelled.value, augmented=False)}
        return dtypes.pop() if len(dtypes) == 1 else Dtype.UNKNOWN

    @staticmethod
    def _batch_data(facts: DtypeFacts, node: cst.BaseExpression) -> bool:
        """An element unpacked from a ``train_step``'s ``data``: the dataset's batch as it is (Keras autocasts layer
        inputs, not the data a train step gets), float16 only by the analysis' default for parameters."""
        place = facts.place(node)
        if not isinstance(node, cst.Name) or place is None or place.kind is not RegionKind.TRAIN_STEP or \
                place.function is None or place.function.name.value != "train_step":
            return False
        params = [p.name.value for p in place.function.params.params]
        unpacked = facts.unpacked_from(node)
        return len(params) == 2 and bool(unpacked) and all(
            isinstance(v, cst.Name) and v.value == params[1] for v, _ in unpacked)

    def _log_of_probability(self, call: cst.Call, x: cst.BaseExpression, natural: bool) -> None:
        """``log(softmax(x))``: a float16 probability below 6e-8 is 0, and its log -inf (NaN in the loss)."""
        fix = None
        imports: tuple[str, ...] = ()
        spec = _spec(self.context, x)
        if natural and spec is not None and spec.has(Kind.PROBABILITY) and spec.stable_log:
            stable = spec.stable_log
            if backend_agnostic(self.context):
                spelled, imports = ops_spelling(self.context)
                template = cst.parse_expression(f"{spelled}.{stable}()")
            else:
                tf, imports = tf_spelling(self.context)
                template = cst.parse_expression(f"{tf}.{'nn' if stable == 'log_softmax' else 'math'}.{stable}()")
            fix = {call: template.with_changes(args=x.args, lpar=call.lpar, rpar=call.rpar)}
        self.report(call, "log_probability", expression=self.context.code(call),
                    fix=fix, imports=imports, description="Use the stable log-probability op")

    def _bounded(self, facts: DtypeFacts, x: cst.BaseExpression) -> bool:
        """``exp(x)`` cannot overflow: x is not float16, or is ≤ 0 (or small) by its form."""
        if _stable_exp_argument(self.context, x) or facts.dtype_of(x) is not Dtype.FLOAT16 or \
                facts.nonpositive(x) or facts.bounded_above(x, 11.0) or self._clipped_below(facts, x, 11.0):
            return True
        # `log_s, t = split(h, 2); log_s = tanh(log_s)`: the binding that reaches this use, not every binding; and
        # `logits = logits - reduce_max(logits)` rebinding the name to its max shift (wave 15's spatial softmax).
        reached = reaching_value(facts, x, self._fold_cache) if isinstance(x, cst.Name) else None
        return reached is not None and (facts.bounded_above(reached, 11.0) or
                                        _stable_exp_argument(self.context, reached))

    def _clipped_below(self, facts: DtypeFacts, x: cst.BaseExpression, bound: float) -> bool:
        """``x`` is ``minimum(v, C)``/``clip_by_value(v, lo, C)`` (or a name whose reaching value is) with ``C`` a
        number ≤ ``bound`` folded from literals and module constants (``np.log(1000. / 16.)``: tfm box decoding)."""
        cache = self._fold_cache
        if isinstance(x, cst.Name):
            x = reaching_value(facts, x, cache)
        spec = _spec(self.context, x) if isinstance(x, cst.Call) else None
        if spec is None:
            return False
        if spec.has(Kind.CEILING):
            limits = [a.value for a in x.args if a.keyword is None]
        elif spec.has(Kind.CLIP):
            high = argument(x, "clip_value_max", 2)
            limits = [high.value] if high is not None else []
        else:
            return False
        for limit in limits:
            value = folded(facts, limit, self.context.resolve, cache=cache)
            if value is not None and value.value <= bound:
                return True
        return False

    def _complement(self, facts: DtypeFacts, spec: op_table.OpSpec, x: cst.BaseExpression) -> cst.BaseExpression | None:
        """``v`` of ``log(1 - v)`` (or ``log1p(-v)``) with ``v`` a float16 tensor not bounded below 1 - 2**-12: the
        log's own domain says v < 1, and float16's spacing below 1 is 2**-11, so any v above 0.99976 is 1.0 and the
        log -inf (a sigmoid above logit 8.3, a noise schedule's alpha_bar at t = 0 cast to float16)."""
        if not spec.has(Kind.NATURAL_LOG):
            return None
        if spec.has(Kind.LOG1P):
            ok = isinstance(x, cst.UnaryOperation) and isinstance(x.operator, cst.Minus)
            v = x.expression if ok else None
        else:
            ok = isinstance(x, cst.BinaryOperation) and isinstance(x.operator, cst.Subtract) and number(x.left) == 1
            v = x.right if ok else None
        if v is None or number(v) is not None or facts.dtype_of(v) is not Dtype.FLOAT16 or facts.nonpositive(v) or \
                facts.bounded_above(v, 1.0 - 2.0 ** -11):
            return None
        # Float16 by evidence only: a layer's call (or a method it calls), where Keras autocasts. Elsewhere a
        # parameter is float16 because its callers are unseen (a loss object, a schedule's nested helper), and
        # those callers may cast to float32 first (tfm centernet's task does).
        place = facts.place(x)
        return v if place is not None and place.layer_method else None

    def _sum_of_exps(self, facts: DtypeFacts, x: cst.BaseExpression) -> bool:
        """``x`` is a sum of (weighted) exps that cannot overflow but can underflow (a Gaussian mixture's
        ``sum(pi * exp(-z**2 / 2) / sigma)``): a log-sum-exp by hand, 0 once every exp is below float16's 6e-8."""
        if isinstance(x, cst.Name):
            x = facts.value_of(x)
        if x is None or not _is(self.context, x, Kind.LONG_SUM, Kind.MEAN) or _is(self.context, x, Kind.CUMULATIVE):
            return False
        exps: list[cst.Call] = []
        pending, seen = [first_arg(x)], 0
        while pending and seen < 16:  # the summand through names, products and quotients' numerators
            node, seen = pending.pop(), seen + 1
            if isinstance(node, cst.Name):
                pending.append(facts.value_of(node))
            elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
                pending += [node.left, node.right]
            elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
                pending.append(node.left)
            elif _is(self.context, node, Kind.EXP) and not _is(self.context, node, Kind.EXPM1) and first_arg(node):
                exps.append(node)
        # exp(x - max(x)) or exp(log_softmax(x)): the sum holds a 1 (or is 1); an unbounded exp is reported itself.
        return bool(exps) and all(self._bounded(facts, first_arg(e)) and not self._normalised(facts, first_arg(e))
                                  for e in exps)

    def _normalised(self, facts: DtypeFacts, v: cst.BaseExpression) -> bool:
        if _is(self.context, v, Kind.LOG_PROBABILITY):
            return True
        if not (isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Subtract)):
            return False
        right = facts.value_of(v.right) if isinstance(v.right, cst.Name) else v.right
        while right is not None and _is(self.context, right, Kind.STOP_GRADIENT) and right.args:
            right = right.args[0].value
        return right is not None and (_is(self.context, right, Kind.MAX) or _is(self.context, right, Kind.LOGSUMEXP))

    def _exp_argument(self, facts: DtypeFacts, node) -> cst.BaseExpression | None:
        if _is(self.context, node, Kind.EXP) and first_arg(node) is not None:
            return first_arg(node)
        if isinstance(node, cst.Name):
            value = facts.value_of(node)
            if value is not None:
                return self._exp_argument(facts, value)
        return None

    def _manual_softmax(self, facts: DtypeFacts, div: cst.BinaryOperation, handled: set) -> None:
        x = self._exp_argument(facts, div.left)
        right = div.right
        if x is None or not _is(self.context, right, Kind.LONG_SUM) or _is(self.context, right, Kind.CUMULATIVE):
            return
        inner = first_arg(right)
        x2 = self._exp_argument(facts, inner) if inner is not None else None
        if x2 is None or self.context.code(x) != self.context.code(x2):
            return
        if self._bounded(facts, x):
            return
        for node in (div.left, inner):
            handled.add(node)
            if isinstance(node, cst.Name):
                handled.update(facts.values_of(node))
        axis = argument(right, "axis", 1)
        fix = None
        imports: tuple[str, ...] = ()
        if axis is not None and isinstance(div.left, cst.Call):
            if backend_agnostic(self.context):
                spelled, imports = ops_spelling(self.context)
                template = cst.parse_expression(f"{spelled}.softmax(__x__, axis=__axis__)")
            else:
                tf, imports = tf_spelling(self.context)
                template = cst.parse_expression(f"{tf}.nn.softmax(__x__, axis=__axis__)")
            fix = {div: template.with_changes(
                lpar=div.lpar, rpar=div.rpar,
                args=[template.args[0].with_changes(value=x), template.args[1].with_changes(value=axis.value)])}
        self.report(div, "manual_softmax", fix=fix, imports=imports, description="Use tf.nn.softmax")
