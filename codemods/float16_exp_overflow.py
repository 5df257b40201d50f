"""MP204: exp/pow of float16 tensors that overflow (exp(x) is inf from x ≈ 11.1)."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import (
    Dtype, Region, argument, backend_agnostic, dtype_analysis, first_arg, number, ops_spelling, tf_spelling,
)
from mpfix.codemods.analysis import float32_ops
from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.findings import FixSafety


_EXPS = {"exp", "expm1"}
_POWS = {"pow", "power"}


def _op(context, node: cst.BaseExpression) -> str | None:
    return float32_ops.op_name(context.resolve(node))


_first = first_arg


def _stable_exp_argument(context, node: cst.BaseExpression) -> bool:
    """exp(x - max(x)), exp(-|x|), exp(log_softmax(x)): ≤ 1, cannot overflow."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract):
        right = node.right
        while isinstance(right, cst.Call) and (_op(context, right.func) or "").endswith("stop_gradient") and right.args:
            right = right.args[0].value
        if isinstance(right, cst.Call) and (_op(context, right.func) or "").split(".")[-1] in ("reduce_max", "max", "reduce_logsumexp", "logsumexp"):
            return True
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract) and \
            _has_log_sigmoid_term(context, node.right):
        # Focal-loss modulator (1 - p_t)^γ = exp(-γ·z·x - γ·log1p(exp(-x))): for labels z in {0, 1}
        # the argument is -γ·log(1 + exp(±x)) ≤ 0 (tf-models' legacy detection losses).
        return True
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Call):
        return (_op(context, node.expression.func) or "").split(".")[-1] in ("abs", "square", "relu", "softplus")
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Divide, cst.Multiply)) and \
            isinstance(node.left, cst.UnaryOperation) and isinstance(node.left.operator, cst.Minus):
        # exp(-d² / (2σ²)): a Gaussian, bounded by 1.
        return bool(re.search(r"square|\*\*\s*2|distance|dist", context.code(node.left)))
    if isinstance(node, cst.Call):
        return (_op(context, node.func) or "").split(".")[-1] in ("log_softmax", "log_sigmoid", "log_softmax_v2")
    return False


def _has_log_sigmoid_term(context, node: cst.BaseExpression) -> bool:
    """``node`` is ``k * log1p(exp(v))`` or ``k * softplus(v)``: a log(1 + e^v) term."""
    while isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        node = node.right if isinstance(node.right, cst.Call) else node.left
    if not isinstance(node, cst.Call):
        return False
    short = (_op(context, node.func) or "").split(".")[-1]
    if short == "softplus":
        return True
    inner = _first(node)
    return short == "log1p" and isinstance(inner, cst.Call) and (_op(context, inner.func) or "").split(".")[-1] == "exp"


class Float16ExpOverflow(Rule):
    code = "MP204"
    name = "float16-exp-overflow"
    message = "`exp`/`pow` of a float16 tensor overflows (exp(x) is inf from x ≈ 11.1); use tf.nn.softmax or float32"
    fix_safety = FixSafety.UNSAFE
    requires_float16 = True
    # Literal-led (a leading \b makes re try every position): exp(, expm1(, pow(, power( as whole words.
    triggers = (re.compile(r"exp(?<!\wexp)(?:m1)?\s*\("), re.compile(r"pow(?<!\wpow)(?:er)?\s*\("))
    explanation = """
        ## What it does
        Finds `tf.exp`, `tf.math.expm1` and `tf.pow` on tensors that are float16 under
        `mixed_float16`, and manual softmaxes `tf.exp(x) / tf.reduce_sum(tf.exp(x), axis)`.
        Arguments that cannot exceed 0 by their form — `exp(x - reduce_max(x))`, `exp(-abs(x))`,
        `exp(-x**2)`, `exp(-log(10000.0) * i / d)`, `exp(cumsum(log(p)))` — are left alone, and so
        are complex values and float32 ones.

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
        Unsafe: only the manual softmax is rewritten (same values where the original was finite);
        other uses are reported without a fix, since casting back to float16 would overflow again.
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
    ]

    def visit_Module(self, node: cst.Module) -> None:
        scope = dtype_analysis(self.context)
        handled: set[cst.CSTNode] = set()
        items = list(scope.region_of.items())
        for div, region in items:
            if isinstance(div, cst.BinaryOperation) and isinstance(div.operator, cst.Divide) and region.kind != "module":
                self._manual_softmax(scope, div, region, handled)
        for call, region in items:
            if not isinstance(call, cst.Call) or call in handled or region.kind == "module":
                continue
            op = _op(self.context, call.func)
            x = _first(call)
            if op is None or x is None:
                continue
            if op in _EXPS:
                if _stable_exp_argument(self.context, x) or scope.dtype(x, region) is not Dtype.FLOAT16 or \
                        scope.nonpositive(x, region):
                    continue
                self.report(call, f"`{self.context.code(call.func)}` of a float16 tensor is inf from 11.1 up; "
                                  "cast the input to float32 and keep the result float32 until it is back in range")
            elif op in _POWS and len(call.args) >= 2:
                # Only literal exponents say the result grows: pow(1 - p, gamma) (focal losses) and
                # pow(10000., i / d) (positional encodings) stay in range, and were most of the
                # tf-models findings when every pow was flagged.
                exponent = number(call.args[1].value)
                if exponent is None or 0 <= exponent <= 2 or scope.dtype(x, region) is not Dtype.FLOAT16:
                    continue
                self.report(call, "`pow` on float16 tensors overflows past 65504 (or underflows below 6e-8); "
                                  "compute it in float32")

    def _exp_argument(self, node, region: Region) -> cst.BaseExpression | None:
        if isinstance(node, cst.Call) and _op(self.context, node.func) in _EXPS and _first(node) is not None:
            return _first(node)
        if isinstance(node, cst.Name):
            values = region.assigned.get(node.value, [])
            if len(values) == 1:
                return self._exp_argument(values[0], region)
        return None

    def _manual_softmax(self, scope, div: cst.BinaryOperation, region: Region, handled: set) -> None:
        x = self._exp_argument(div.left, region)
        right = div.right
        if x is None or not isinstance(right, cst.Call) or (_op(self.context, right.func) or "").split(".")[-1] not in ("reduce_sum", "sum"):
            return
        inner = _first(right)
        x2 = self._exp_argument(inner, region) if inner is not None else None
        if x2 is None or self.context.code(x) != self.context.code(x2):
            return
        if _stable_exp_argument(self.context, x) or scope.dtype(x, region) is not Dtype.FLOAT16 or scope.nonpositive(x, region):
            return
        for node in (div.left, inner):
            handled.add(node)
            if isinstance(node, cst.Name):
                handled.update(v for v in region.assigned.get(node.value, []))
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
        self.report(div, "manual softmax `exp(x) / reduce_sum(exp(x))` overflows in float16 once x > 11.1; "
                         "use `tf.nn.softmax`", fix=fix, imports=imports, description="Use tf.nn.softmax")
