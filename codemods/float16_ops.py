"""TF ops that overflow in float16, and float32 values mixed into float16 compute.

float16 tops out at 65504: a sum of squares over a few thousand activations of
magnitude 5 already overflows, and ``exp(x)`` is inf from x ≈ 11.1. TensorFlow
never promotes dtypes, so the cure (compute in float32) must cast back before
meeting float16 tensors again, and a float32 constant inside ``Layer.call`` is
an ``InvalidArgumentError`` under ``mixed_float16``.
"""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import (
    LOSS_NAME, Kind, Region, argument, float16_scope, is_simple, number, tf_spelling,
)
from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.findings import FixSafety

_NORMS = {"nn.l2_loss": "l2_loss", "norm": "norm", "linalg.norm": "norm", "math.reduce_euclidean_norm": "norm",
          "math.reduce_variance": "variance", "math.reduce_std": "standard deviation", "ops.var": "variance",
          "ops.std": "standard deviation", "ops.norm": "norm", "reduce_variance": "variance", "reduce_std": "standard deviation"}
_SUMS = {"reduce_sum", "math.reduce_sum", "ops.sum"}
_SQUARES = {"square", "math.square", "ops.square"}
_EXPS = {"exp", "math.exp", "math.expm1", "ops.exp", "ops.expm1"}
_POWS = {"pow", "math.pow", "ops.power"}
_CREATE = {"constant", "ones", "zeros", "convert_to_tensor", "eye", "linspace", "random.normal", "random.uniform",
           "range"}


def _op(context, node: cst.BaseExpression) -> str | None:
    resolved = context.resolve(node)
    if resolved is None:
        return None
    for prefix in ("tensorflow.", "keras."):
        if resolved.startswith(prefix):
            return resolved[len(prefix):]
    return None


def _first(call: cst.Call) -> cst.BaseExpression | None:
    return call.args[0].value if call.args and call.args[0].keyword is None and not call.args[0].star else None


def _cast(tf: str, node: cst.BaseExpression, dtype: str) -> cst.Call:
    template = cst.parse_expression(f"{tf}.cast(__x__, {dtype})")
    return template.with_changes(args=[template.args[0].with_changes(value=node), template.args[1]])


def _is_loss(scope, call: cst.Call, region: Region, code) -> bool:
    """The reduction's result is a loss term: it may stay float32 (losses are float32 in Keras)."""
    for ancestor in scope.ancestors(call):
        if isinstance(ancestor, cst.Call) and isinstance(ancestor.func, cst.Attribute) and ancestor.func.attr.value == "add_loss":
            return True
        if isinstance(ancestor, cst.Assign):
            return any(LOSS_NAME.search(code(t.target)) for t in ancestor.targets)
        if isinstance(ancestor, (cst.AugAssign, cst.AnnAssign)):
            return bool(LOSS_NAME.search(code(ancestor.target)))
        if isinstance(ancestor, cst.Return):
            return region.kind == "loss"
        if isinstance(ancestor, cst.BinaryOperation) and any(
                LOSS_NAME.search(n.value) for n in (ancestor.left, ancestor.right) if isinstance(n, cst.Name)):
            return True
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.FunctionDef)):
            return False
    return False


class Float16UnsafeReduction(Rule):
    code = "MP203"
    name = "float16-unsafe-reduction"
    message = "Sum of squares over float16 activations overflows past 65504; compute it in float32"
    fix_safety = FixSafety.UNSAFE
    requires_float16 = True
    # Substrings, and regexes that start with a literal (a leading \b makes re try every position).
    triggers = ("l2_loss", "reduce_variance", "reduce_std", ".var(", ".std(", re.compile(r"square(?<!\wsquare)\s*\("),
                re.compile(r"norm(?<!\wnorm)\s*\("), re.compile(r"\*\*\s*2\b"))
    explanation = """
        ## What it does
        Finds `tf.nn.l2_loss`, `tf.reduce_sum(tf.square(x))`, `tf.norm`,
        `tf.math.reduce_variance` and `tf.math.reduce_std` over tensors that are float16 under
        `mixed_float16` (activations inside `call`, model outputs in a training step).

        ## Why is this bad?
        Squares grow fast and float16 stops at 65504: 3,000 activations of magnitude 5 sum to
        75,000, which is `inf`. An activity regulariser `1e-4 * tf.nn.l2_loss(h)` makes the loss
        `inf` from the first step while the gradients stay finite, so the loss scale never
        reacts. Weights are float32 variables and are not flagged outside a layer's `call`.

        ## Example
        ```python
        loss = ce(y, logits) + 1e-4 * tf.nn.l2_loss(hidden)
        ```

        ## Use instead
        ```python
        loss = ce(y, logits) + 1e-4 * tf.nn.l2_loss(tf.cast(hidden, tf.float32))
        ```
        A result that is not a loss is cast back to the input's dtype: TensorFlow does not promote,
        and `float16 + float32` is an error.

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
        Invalid(
            """
            import tensorflow as tf

            class Scale(tf.keras.layers.Layer):
                def call(self, x):
                    energy = tf.reduce_sum(tf.square(x), axis=-1, keepdims=True)
                    return x * tf.math.rsqrt(energy + 1.0)
            """,
            """
            import tensorflow as tf

            class Scale(tf.keras.layers.Layer):
                def call(self, x):
                    energy = tf.cast(tf.reduce_sum(tf.square(tf.cast(x, tf.float32)), axis=-1, keepdims=True), x.dtype)
                    return x * tf.math.rsqrt(energy + 1.0)
            """,
            policy="mixed_float16",
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        scope = float16_scope(self.context)
        for call, region in list(scope.region_of.items()):
            if not isinstance(call, cst.Call) or region.kind == "module":
                continue
            op = _op(self.context, call.func)
            x = _first(call)
            if op is None or x is None:
                continue
            what = _NORMS.get(op)
            target = x
            if what is None and op in _SUMS:
                inner = x
                if isinstance(inner, cst.Call) and _op(self.context, inner.func) in _SQUARES and _first(inner) is not None:
                    target = _first(inner)
                elif isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Multiply) and \
                        self.context.code(inner.left) == self.context.code(inner.right):
                    target = inner.left
                elif isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Power) and number(inner.right) == 2:
                    target = inner.left
                else:
                    continue
                what = "sum of squares"
            if what is None or scope.kind(target, region) is not Kind.TENSOR:
                continue
            self._report(scope, call, target, region, what)

    def _report(self, scope, call: cst.Call, target, region: Region, what: str) -> None:
        tf, imports = tf_spelling(self.context)
        cast_in = {target: _cast(tf, target, f"{tf}.float32")}
        message = f"float16 {what} of `{self.context.code(target)}` overflows past 65504; compute it in float32"
        if _is_loss(scope, call, region, self.context.code):
            fix = cast_in
        else:
            back = f"{self.context.code(target)}.dtype" if is_simple(target) else (
                "self.compute_dtype" if region.in_class and region.kind in ("layer-call", "helper") else None)
            if back is None:
                self.report(call, message + " and cast the result back")
                return
            new_call = call.deep_replace(target, _cast(tf, target, f"{tf}.float32"))
            fix = {call: _cast(tf, new_call, back)}
            message += " and cast the result back"
        self.report(call, message, fix=fix, imports=imports, description="Compute in float32")


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
        `exp(x - reduce_max(x))` and `exp(-abs(x))` are bounded by 1 and left alone.

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
                def call(self, mean, log_var):
                    return mean + tf.exp(0.5 * log_var) * tf.random.normal(tf.shape(mean), dtype=mean.dtype)
            """,
            policy="mixed_float16",
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        scope = float16_scope(self.context)
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
                if _stable_exp_argument(self.context, x) or scope.kind(x, region) is not Kind.TENSOR:
                    continue
                self.report(call, f"`{self.context.code(call.func)}` of a float16 tensor is inf from 11.1 up; "
                                  "cast the input to float32 and keep the result float32 until it is back in range")
            elif op in _POWS and len(call.args) >= 2:
                # Only literal exponents say the result grows: pow(1 - p, gamma) (focal losses) and
                # pow(10000., i / d) (positional encodings) stay in range, and were most of the
                # tf-models findings when every pow was flagged.
                exponent = number(call.args[1].value)
                if exponent is None or 0 <= exponent <= 2 or scope.kind(x, region) is not Kind.TENSOR:
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
        if _stable_exp_argument(self.context, x) or scope.kind(x, region) is not Kind.TENSOR:
            return
        for node in (div.left, inner):
            handled.add(node)
            if isinstance(node, cst.Name):
                handled.update(v for v in region.assigned.get(node.value, []))
        axis = argument(right, "axis", 1)
        fix = None
        imports: tuple[str, ...] = ()
        if axis is not None and isinstance(div.left, cst.Call):
            tf, imports = tf_spelling(self.context)
            template = cst.parse_expression(f"{tf}.nn.softmax(__x__, axis=__axis__)")
            fix = {div: template.with_changes(
                lpar=div.lpar, rpar=div.rpar,
                args=[template.args[0].with_changes(value=x), template.args[1].with_changes(value=axis.value)])}
        self.report(div, "manual softmax `exp(x) / reduce_sum(exp(x))` overflows in float16 once x > 11.1; "
                         "use `tf.nn.softmax`", fix=fix, imports=imports, description="Use tf.nn.softmax")


def _float32_source(scope, node: cst.BaseExpression, region: Region, context, depth: int = 0):
    """The call that makes ``node`` float32 and its dtype argument (None when implicit)."""
    if depth > 8:
        return None
    if isinstance(node, cst.Name):
        values = region.assigned.get(node.value, [])
        return _float32_source(scope, values[0], region, context, depth + 1) if len(values) == 1 else None
    if isinstance(node, cst.BinaryOperation):
        for side in (node.left, node.right):
            if scope.kind(side, region) is Kind.F32:
                return _float32_source(scope, side, region, context, depth + 1)
        return None
    if not isinstance(node, cst.Call):
        return None
    op = _op(context, node.func) or ""
    short = op.split(".")[-1]
    if short in ("cast", "saturate_cast"):
        dtype = argument(node, "dtype", 1)
        return (node, dtype) if dtype is not None else None
    if short in _CREATE or op in _CREATE:
        return node, argument(node, "dtype", None)
    first = _first(node)
    return _float32_source(scope, first, region, context, depth + 1) if first is not None else None


class HardcodedFloat32InFloat16Compute(Rule):
    code = "MP206"
    name = "hardcoded-float32-in-float16-compute"
    message = "float32 tensor mixed into float16 compute inside `call` (InvalidArgumentError); use `self.compute_dtype`"
    fix_safety = FixSafety.UNSAFE
    requires_float16 = True
    triggers = ("float32", "tf.constant", "tf.ones", "tf.zeros", "tf.sqrt", "math.sqrt")
    also_requires = ("def call",)  # only layer methods: call and what it calls
    explanation = """
        ## What it does
        Inside a layer's `call` (and the methods it calls), finds arithmetic between a tensor
        that follows the layer's compute dtype and one made float32 by hand:
        `tf.cast(d, tf.float32)`, `tf.constant(2.0)`, `tf.ones(shape)`.

        ## Why is this bad?
        Under `mixed_float16` the layer's inputs are float16, and TensorFlow never promotes:
        `float16 * float32` raises `InvalidArgumentError`. The classic case is attention scaling,
        `scores / tf.math.sqrt(tf.cast(depth, tf.float32))`, copied from float32 tutorials.

        ## Example
        ```python
        def call(self, q, k):
            scores = tf.matmul(q, k, transpose_b=True)
            return scores / tf.math.sqrt(tf.cast(tf.shape(k)[-1], tf.float32))
        ```

        ## Use instead
        ```python
        def call(self, q, k):
            scores = tf.matmul(q, k, transpose_b=True)
            return scores / tf.math.sqrt(tf.cast(tf.shape(k)[-1], self.compute_dtype))
        ```

        ## Fix safety
        Unsafe: the constant is computed in the layer's dtype, with float16's precision.
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            class Attention(tf.keras.layers.Layer):
                def call(self, q, k):
                    scores = tf.matmul(q, k, transpose_b=True)
                    return scores / tf.math.sqrt(tf.cast(tf.shape(k)[-1], self.compute_dtype))
        """, policy="mixed_float16"),
        # Both sides explicitly float32: deliberate float32 compute.
        Valid("""
            import tensorflow as tf

            class Softmax32(tf.keras.layers.Layer):
                def call(self, x, mask):
                    x32 = tf.cast(x, tf.float32)
                    y = tf.nn.softmax(x32 + (1.0 - tf.cast(mask, tf.float32)) * -1e9)
                    return tf.cast(y, x.dtype)
        """, policy="mixed_float16"),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            class Attention(tf.keras.layers.Layer):
                def call(self, q, k):
                    scores = tf.matmul(q, k, transpose_b=True)
                    return scores / tf.math.sqrt(tf.cast(tf.shape(k)[-1], tf.float32))
            """,
            """
            import tensorflow as tf

            class Attention(tf.keras.layers.Layer):
                def call(self, q, k):
                    scores = tf.matmul(q, k, transpose_b=True)
                    return scores / tf.math.sqrt(tf.cast(tf.shape(k)[-1], self.compute_dtype))
            """,
            policy="mixed_float16",
        ),
        Invalid(
            """
            import tensorflow as tf

            class Masked(tf.keras.layers.Layer):
                def call(self, inputs, mask):
                    weights = tf.cast(mask, "float32")
                    return inputs * weights
            """,
            """
            import tensorflow as tf

            class Masked(tf.keras.layers.Layer):
                def call(self, inputs, mask):
                    weights = tf.cast(mask, self.compute_dtype)
                    return inputs * weights
            """,
            policy="mixed_float16",
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        scope = float16_scope(self.context)
        for binop, region in list(scope.region_of.items()):
            if not isinstance(binop, cst.BinaryOperation) or not region.layer_method:
                continue
            if isinstance(binop.operator, (cst.BitAnd, cst.BitOr, cst.BitXor, cst.LeftShift, cst.RightShift)):
                continue
            kinds = (scope.kind(binop.left, region), scope.kind(binop.right, region))
            if kinds not in ((Kind.F32, Kind.TENSOR), (Kind.TENSOR, Kind.F32)):
                continue
            f32 = binop.left if kinds[0] is Kind.F32 else binop.right
            source = _float32_source(scope, f32, region, self.context)
            fix = None
            if source is not None:
                call, dtype = source
                replacement = cst.parse_expression("self.compute_dtype")
                if dtype is not None:
                    fix = {dtype.value: replacement}
                elif _op(self.context, call.func):
                    fix = {call: call.with_changes(args=[*call.args, cst.Arg(
                        keyword=cst.Name("dtype"), value=replacement,
                        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))])}
            self.report(f32, f"`{self.context.code(f32)}` is float32 and meets a float16 tensor under mixed_float16 "
                             "(InvalidArgumentError: no implicit promotion); use `self.compute_dtype`",
                        fix=fix, description="Use the layer's compute dtype")
