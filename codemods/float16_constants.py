"""Python constants that float16 cannot hold: masks that become -inf, epsilons that become 0.

A Python float meeting a float16 tensor is converted silently: ``-1e9`` becomes
``-inf`` (float16 max is 65504) and ``(1 - mask) * -inf`` is NaN wherever the
mask is 1; ``1e-8`` becomes ``0.0`` (smallest subnormal ≈ 6e-8), so
``x / (norm + 1e-8)`` divides by zero on zero rows.
"""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import (
    FLOAT16_MAX, SAFE_EPSILON, SAFE_MASK, Kind, Region, argument, arithmetic_root, describe_float16,
    epsilon_vanishes, float16_scope, is_float_literal, is_simple, number, tf_spelling,
)
from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.findings import FixSafety

# Ops where a huge constant meets the other (tensor) arguments elementwise.
_MASK_OPS = {"where", "where_v2", "math.add", "add", "math.subtract", "subtract", "math.multiply", "multiply",
             "math.divide", "divide", "select"}
# Ops that convert a constant to the dtype given next to it.
_CONVERT_OPS = {"cast", "constant", "convert_to_tensor", "fill"}
_EPSILON_KEYWORDS = {"epsilon", "eps", "variance_epsilon", "norm_epsilon", "layer_norm_eps", "layer_norm_epsilon"}
_NOT_LAYERS = re.compile(r"optim|adam|rmsprop|adagrad|adadelta|adamax|nadam|ftrl|lamb|lion|sgd|lars|config|schedule|"
                         r"params|metric|loss", re.IGNORECASE)
_NORM_LAYER_NAME = re.compile(r"(Norm|Normalization|Normalize)$")
# Keras layers that compute in float32 under mixed_float16 whatever their epsilon (checked on
# Keras 2 and 3: LayerNormalization(epsilon=1e-12) stays finite on constant float16 rows).
_UPCASTING_KERAS_LAYERS = {"LayerNormalization", "BatchNormalization", "SyncBatchNormalization"}
_L2_NORMALIZE = {"tensorflow.math.l2_normalize", "tensorflow.nn.l2_normalize", "tensorflow.linalg.l2_normalize"}


def _op(resolved: str | None) -> str | None:
    for prefix in ("tensorflow.", "keras.ops.", "keras.backend."):
        if resolved and resolved.startswith(prefix):
            return resolved[len(prefix):]
    return None


def _signed(value: float, magnitude: str) -> cst.BaseExpression:
    literal = cst.Float(magnitude)
    return cst.UnaryOperation(cst.Minus(), literal) if value < 0 else literal


class Float16OverflowConstant(Rule):
    code = "MP201"
    name = "float16-overflow-constant"
    message = "Constant beyond float16's range (65504) meets a float16 tensor and becomes inf; use -3e4 or compute in float32"
    fix_safety = FixSafety.UNSAFE
    requires_float16 = True
    # What the rule can flag: float literals past 65504 (1e5, 7e4, 100000.0), negative integers
    # past it (a name bound to -1000000), "inf" spelled as float("-inf")/np.inf/math.inf, and
    # dtype extremes. A plain integer literal is never flagged (index arithmetic), so large ints
    # do not pass a file to the parser. Each regex starts with a literal and checks what comes
    # before it with a lookbehind: a leading \d or \b makes re try every position (0.8 s on
    # tfm + keras, against 0.1 s).
    triggers = (
        re.compile(r"e(?<=\de)\+?0*(?:[4-9]|[1-9]\d)\b"),
        re.compile(r"E(?<=\dE)\+?0*(?:[4-9]|[1-9]\d)\b"),
        re.compile(r"\.(?:(?<=\d{6}\.)|(?<=[7-9]\d{4}\.)|(?<=6[6-9]\d{3}\.)|(?<=65[6-9]\d\d\.)|(?<=655[1-9]\d\.)"
                   r"|(?<=6550[5-9]\.)|(?<=\d_\d{3}\.))"),
        re.compile(r"-\s*(?:\d{6,}|[7-9]\d{4}|6[6-9]\d{3}|65[6-9]\d\d|655[1-9]\d|6550[5-9]|\d{1,3}(?:_\d{3})+)\b"),
        re.compile(r"inf(?<=[\"'.+\-\s]inf)(?:inity)?\b"),
        re.compile(r"Inf(?<=[\"'.+\-\s]Inf)(?:inity)?\b"),
        re.compile(r"float(?:32|64)\.m(?:in|ax)\b"),
    )
    explanation = """
        ## What it does
        Finds Python constants larger than float16's maximum (65504) — `-1e9`, `1e10`, `-1e30`,
        `float("-inf")`, `tf.float32.min` — meeting a tensor that is float16 under
        `mixed_float16`: additive attention masks, `tf.where(mask, scores, -1e9)`.

        ## Why is this bad?
        TensorFlow converts the constant to the tensor's dtype without a word: `-1e9` becomes
        `-inf`. `(1 - mask) * -inf` is `0 * -inf = NaN` at every unmasked position, and a softmax
        over a fully masked row of `-inf` is NaN too. The loss is NaN from the first step.

        ## Example
        ```python
        def call(self, scores, mask):
            scores += (1.0 - mask) * -1e9
            return tf.nn.softmax(scores)
        ```

        ## Use instead
        ```python
        def call(self, scores, mask):
            scores += (1.0 - mask) * -3e4
            return tf.nn.softmax(scores)
        ```
        `-3e4` is Keras 3's own float16 mask value: `exp(-3e4)` is 0 in every float type and
        two such masks still add up below 65504. Constants guarded by a dtype test
        (`tf.float16.min if x.dtype == tf.float16 else -1e9`) are left alone.

        ## Fix safety
        Unsafe: the constant changes, which also changes float32 runs if logits exceed 3e4.
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            class Attention(tf.keras.layers.Layer):
                def call(self, scores, mask):
                    scores += (1.0 - mask) * -3e4
                    return tf.nn.softmax(scores)
        """, policy="mixed_float16"),
        Valid("""
            import tensorflow as tf

            class Attention(tf.keras.layers.Layer):
                def call(self, scores, mask):
                    big = tf.float16.min if scores.dtype == tf.float16 else -1e9
                    return tf.nn.softmax(tf.where(mask, scores, big))
        """, policy="mixed_float16"),
        # Float32 compute by choice: the constant meets float32 only.
        Valid("""
            import tensorflow as tf

            class Attention(tf.keras.layers.Layer):
                def call(self, scores, mask):
                    scores = tf.cast(scores, tf.float32)
                    return tf.nn.softmax(scores + (1.0 - tf.cast(mask, tf.float32)) * -1e9)
        """, policy="mixed_float16"),
        # Same code without a float16 policy anywhere: float32 holds -1e9.
        Valid("""
            import tensorflow as tf

            class Attention(tf.keras.layers.Layer):
                def call(self, scores, mask):
                    return scores + (1.0 - mask) * -1e9
        """),
        # Plain Python arithmetic, and clipping bounds (min(x, inf) is x).
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            LIMIT = 1e10
            budget = 2 * LIMIT

            @tf.function
            def step(x):
                return tf.clip_by_value(x, -1e9, 1e9)
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            class Attention(tf.keras.layers.Layer):
                def call(self, scores, mask):
                    scores += (1.0 - mask) * -1e9
                    return tf.nn.softmax(scores)
            """,
            """
            import tensorflow as tf

            class Attention(tf.keras.layers.Layer):
                def call(self, scores, mask):
                    scores += (1.0 - mask) * -3e4
                    return tf.nn.softmax(scores)
            """,
            policy="mixed_float16",
        ),
        Invalid(
            """
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            def masked_softmax(scores, mask):
                return tf.nn.softmax(tf.where(mask, scores, float("-inf")))

            class Block(tf.keras.layers.Layer):
                def call(self, x, mask):
                    return masked_softmax(tf.matmul(x, x, transpose_b=True), mask)
            """,
            """
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            def masked_softmax(scores, mask):
                return tf.nn.softmax(tf.where(mask, scores, -3e4))

            class Block(tf.keras.layers.Layer):
                def call(self, x, mask):
                    return masked_softmax(tf.matmul(x, x, transpose_b=True), mask)
            """,
        ),
        # tf-models multi_channel_attention: the mask is float32 here, but it meets the float16
        # scores (MP206), and once it follows the compute dtype -100000.0 is -inf.
        Invalid(
            """
            import tensorflow as tf

            class DocAttention(tf.keras.layers.Layer):
                def call(self, probs, mask):
                    mask = tf.cast(mask, tf.float32)
                    adder = (1.0 - mask) * -100000.0
                    return tf.nn.softmax(probs + adder)
            """,
            """
            import tensorflow as tf

            class DocAttention(tf.keras.layers.Layer):
                def call(self, probs, mask):
                    mask = tf.cast(mask, tf.float32)
                    adder = (1.0 - mask) * -3e4
                    return tf.nn.softmax(probs + adder)
            """,
            policy="mixed_float16",
        ),
        # A module constant used in a layer: the definition is what changes.
        Invalid(
            """
            import tensorflow as tf

            NEG_INF = -1e9

            class Attention(tf.keras.layers.Layer):
                def call(self, q, k, bias):
                    logits = tf.matmul(q, k, transpose_b=True)
                    return logits + bias * NEG_INF
            """,
            """
            import tensorflow as tf

            NEG_INF = -3e4

            class Attention(tf.keras.layers.Layer):
                def call(self, q, k, bias):
                    logits = tf.matmul(q, k, transpose_b=True)
                    return logits + bias * NEG_INF
            """,
            policy="mixed_float16",
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        scope = float16_scope(self.context)
        for candidate, region in list(scope.region_of.items()):
            if isinstance(candidate, cst.Name) and scope.parent.get(candidate) is not None:
                resolved = scope.constant(candidate, region)
                if resolved is None or candidate is resolved[1] or not isinstance(resolved[1], (cst.Float, cst.UnaryOperation)):
                    continue
                value, literal = resolved
            elif isinstance(candidate, (cst.Float, cst.Call, cst.Attribute, cst.UnaryOperation)):
                if isinstance(scope.parent.get(candidate), cst.UnaryOperation):
                    continue  # judged as part of -1e9
                value = number(candidate)
                if value is None or not is_float_literal(candidate):
                    continue
                literal = candidate
            else:
                continue
            if abs(value) <= FLOAT16_MAX or scope.is_guarded(candidate):
                continue
            if not self._meets_float16(scope, candidate, region):
                continue
            spelled = self.context.code(candidate)
            where = f"`{spelled}`" if candidate is literal else f"`{spelled}` (= {self.context.code(literal)})"
            self.report(
                candidate,
                f"{where} becomes {'-inf' if value < 0 else 'inf'} in float16 (max 65504); "
                f"`0 * inf` and softmax over all-inf rows give NaN; use {'-' if value < 0 else ''}{SAFE_MASK}",
                fix={literal: _signed(value, SAFE_MASK)},
                description=f"Use the float16-safe constant {'-' if value < 0 else ''}{SAFE_MASK}",
            )

    def _float32_meets_float16(self, scope, node: cst.CSTNode, region: Region) -> bool:
        """A float32 value in a layer method that later meets a float16 tensor (directly or by name)."""
        current = node
        parent = scope.parent.get(current)
        while isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)):
            if isinstance(parent, cst.BinaryOperation):
                sibling = parent.right if parent.left is current else parent.left
                if scope.kind(sibling, region) is Kind.TENSOR:
                    return True
            current, parent = parent, scope.parent.get(parent)
        if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name)):
            return False
        name = parent.targets[0].target.value
        for binop in region.binops:
            for mine, other in ((binop.left, binop.right), (binop.right, binop.left)):
                if isinstance(mine, cst.Name) and mine.value == name and scope.kind(other, region) is Kind.TENSOR:
                    return True
        return False

    def _meets_float16(self, scope, node: cst.CSTNode, region: Region) -> bool:
        root = arithmetic_root(scope, node)
        if root is not node:
            # Climb until the constant meets a tensor: `tf.cast(m, tf.float32) * 1e6` meets float32
            # first (fine in float32; mixing that with float16 is MP206's error, not an overflow) —
            # unless, inside a layer's call, that float32 value goes on to meet the layer's float16
            # tensors: MP206 then makes it the compute dtype, and the constant becomes inf with it
            # (tf-models' multi_channel_attention: `(1.0 - mask32) * -100000.0` added to scores).
            current = node
            while current is not root:
                parent = scope.parent.get(current)
                if isinstance(parent, cst.BinaryOperation):
                    sibling = parent.right if parent.left is current else parent.left
                    kind = scope.kind(sibling, region)
                    if kind is Kind.TENSOR:
                        return True
                    if kind is Kind.INT:
                        return False
                    if kind is Kind.F32:
                        return region.layer_method and self._float32_meets_float16(scope, parent, region)
                current = parent
            return False
        parent = scope.parent.get(node)
        if isinstance(parent, cst.Arg):
            call = scope.parent.get(parent)
            if not isinstance(call, cst.Call):
                return False
            op = _op(self.context.resolve(call.func))
            if op is None:
                return False
            short = op.split(".")[-1]
            if op in _MASK_OPS or short in ("where",):
                others = [a.value for a in call.args if a is not parent and a.keyword is None]
                if short == "where":
                    others = others[1:] if call.args and call.args[0] is not parent else others
                return any(scope.kind(o, region) is Kind.TENSOR for o in others)
            if short in _CONVERT_OPS:
                dtype = argument(call, "dtype", 1 if short == "cast" else None)
                return dtype is not None and scope.kind(dtype.value, region) in (Kind.PY, Kind.TENSOR) and \
                    "float32" not in self.context.code(dtype.value) and "float64" not in self.context.code(dtype.value)
        return False


class Float16UnderflowEpsilon(Rule):
    code = "MP202"
    name = "float16-underflow-epsilon"
    message = "Epsilon below float16's range becomes 0 (or a lossy subnormal) in float16; use 1e-4 or compute in float32"
    fix_safety = FixSafety.UNSAFE
    requires_float16 = True
    # Literals of 1e-6 and below (exponent or written out), and l2_normalize's default 1e-12.
    # Literal-led regexes with lookbehinds: same files as `\d[eE]-...`, 15x faster to search.
    triggers = (re.compile(r"e-(?<=\de-)0*(?:[6-9]|[1-9]\d)\b"), re.compile(r"E-(?<=\dE-)0*(?:[6-9]|[1-9]\d)\b"),
                re.compile(r"0\.00000\d"), "l2_normalize")
    explanation = """
        ## What it does
        Finds small constants added to float16 tensors to keep a division, `sqrt` or `log`
        finite — `x + 1e-8`, `sqrt(var + 1e-12)`, `x / (norm + 1e-9)` — `epsilon=` arguments of
        TF ops and of custom normalisation layers, and `tf.math.l2_normalize` with its default
        epsilon (1e-12), where the tensors are float16 under `mixed_float16`.

        ## Why is this bad?
        float16's smallest subnormal is ≈ 6e-8: `1e-8` and `1e-12` become exactly 0, and `1e-7`
        becomes 1.19e-7 (19% off). The guard is gone: a zero-variance row gives `0 / 0 = NaN`,
        `l2_normalize` of a zero vector gives NaN. Keras' own `LayerNormalization` and
        `BatchNormalization` compute in float32 and are not flagged; neither are optimizer
        epsilons (optimizer state is float32) nor layers built with `dtype="float32"`.

        ## Example
        ```python
        def call(self, x):
            return x / (tf.norm(x, axis=-1, keepdims=True) + 1e-8)
        ```

        ## Use instead
        ```python
        def call(self, x):
            return x / (tf.norm(x, axis=-1, keepdims=True) + 1e-4)
        ```
        or compute the normalisation in float32 and cast the result back to `x.dtype`.

        ## Fix safety
        Unsafe: a larger epsilon (1e-4, a normal float16 number) changes results slightly in
        float32 too; `l2_normalize` is rewritten to run in float32 and cast back.
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            class Norm(tf.keras.layers.Layer):
                def call(self, x):
                    return x / (tf.norm(x, axis=-1, keepdims=True) + 1e-4)
        """, policy="mixed_float16"),
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3, epsilon=1e-9)
            norm = tf.keras.layers.LayerNormalization(epsilon=1e-12)

            class Block(tf.keras.layers.Layer):
                def __init__(self):
                    super().__init__()
                    self.norm = RMSNorm(epsilon=1e-12, dtype="float32")

            def report(flops):
                print(flops * 1e-9, "GFLOPs")
        """),
        # Label smoothing: `low` mixes with tf.cast(..., tf.float32), so it is float32 (TF never promotes).
        Valid("""
            import tensorflow as tf

            def smoothing_loss(logits, labels, smoothing, vocab_size):
                confidence = 1.0 - smoothing
                low = (1.0 - confidence) / tf.cast(vocab_size - 1, tf.float32)
                return -(confidence * tf.math.log(confidence) + low * tf.math.log(low + 1e-20))
        """, policy="mixed_float16"),
        # Optimizer and regularizer code sees float32 variables, whatever the compute policy.
        Valid("""
            import tensorflow as tf

            class Muon(tf.keras.optimizers.Optimizer):
                def update_step(self, gradient, variable, learning_rate):
                    x = gradient / (tf.norm(gradient) + 1e-7)
                    variable.assign_sub(learning_rate * x)

            class OrthogonalRegularizer(tf.keras.regularizers.Regularizer):
                def __call__(self, inputs):
                    inputs = tf.math.l2_normalize(inputs, axis=0)
                    return tf.reduce_sum(tf.matmul(tf.transpose(inputs), inputs))
        """, policy="mixed_float16"),
        # Sharpness-aware minimisation: gradients of float32 variables are float32.
        Valid("""
            import tensorflow as tf

            class SAM(tf.keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        loss = self.compiled_loss(y, self(x))
                    gradients = tape.gradient(loss, self.trainable_variables)
                    norm = self._norm(gradients)
                    return self.rho / (norm + 1e-12)

                def _norm(self, gradients):
                    return tf.norm(tf.stack([tf.norm(g) for g in gradients if g is not None]))
        """, policy="mixed_float16"),
        # IoU: `neg_log_iou * mask32` only runs if iou, and the areas it is made of, are float32.
        Valid("""
            import tensorflow as tf

            def iou_loss(pred, target, mask):
                inter = tf.minimum(pred, target)
                union = pred + target - inter
                iou = inter / (union + 1e-8)
                mask32 = tf.cast(mask, tf.float32)
                neg_log_iou = -tf.math.log(iou)
                return tf.reduce_sum(neg_log_iou * mask32)
        """, policy="mixed_float16"),
        Valid("""
            import tensorflow as tf

            class Norm(tf.keras.layers.Layer):
                def call(self, x):
                    x = tf.cast(x, tf.float32)
                    return tf.math.l2_normalize(x, axis=-1) / tf.sqrt(tf.reduce_mean(x * x) + 1e-12)
        """, policy="mixed_float16"),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            class Norm(tf.keras.layers.Layer):
                def call(self, x):
                    return x / (tf.norm(x, axis=-1, keepdims=True) + 1e-8)
            """,
            """
            import tensorflow as tf

            class Norm(tf.keras.layers.Layer):
                def call(self, x):
                    return x / (tf.norm(x, axis=-1, keepdims=True) + 1e-4)
            """,
            policy="mixed_float16",
        ),
        Invalid(
            """
            import tensorflow as tf

            class Embed(tf.keras.layers.Layer):
                def call(self, x):
                    return tf.math.l2_normalize(x, axis=-1)
            """,
            """
            import tensorflow as tf

            class Embed(tf.keras.layers.Layer):
                def call(self, x):
                    return tf.cast(tf.math.l2_normalize(tf.cast(x, tf.float32), axis=-1), x.dtype)
            """,
            policy="mixed_float16",
        ),
        Invalid(
            """
            import tensorflow as tf

            class RMSNorm(tf.keras.layers.Layer):
                def __init__(self, epsilon=1e-6, **kwargs):
                    super().__init__(**kwargs)
                    self.epsilon = epsilon

                def call(self, x):
                    return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), -1, keepdims=True) + self.epsilon)

            def build():
                return RMSNorm(epsilon=1e-12)
            """,
            """
            import tensorflow as tf

            class RMSNorm(tf.keras.layers.Layer):
                def __init__(self, epsilon=1e-6, **kwargs):
                    super().__init__(**kwargs)
                    self.epsilon = epsilon

                def call(self, x):
                    return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), -1, keepdims=True) + self.epsilon)

            def build():
                return RMSNorm(epsilon=1e-12, dtype="float32")
            """,
            policy="mixed_float16",
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        scope = float16_scope(self.context)
        for candidate, region in list(scope.region_of.items()):
            if isinstance(candidate, cst.Call):
                self._check_call(scope, candidate, region)
            elif isinstance(candidate, (cst.Float, cst.Name)):
                self._check_additive(scope, candidate, region)
        for call in scope.all_calls:
            if call not in scope.region_of or scope.region_of[call].kind == "module":
                # Layers are built in __init__, build() and model functions, outside any region.
                for arg in call.args:
                    if arg.keyword is not None and arg.keyword.value in _EPSILON_KEYWORDS:
                        value = number(arg.value)
                        if value is not None and epsilon_vanishes(value) and _op(self.context.resolve(call.func)) is None:
                            self._check_constructor(call, arg, value, self.context.resolve(call.func))

    def _check_additive(self, scope, node, region: Region) -> None:
        if isinstance(node, cst.Name):
            resolved = scope.constant(node, region)
            if resolved is None or resolved[1] is node or not isinstance(resolved[1], cst.Float):
                return
            value, literal = resolved
            if isinstance(scope.parent.get(node), (cst.AssignTarget,)):
                return
        else:
            value, literal = number(node), node
            if value is None or isinstance(scope.parent.get(node), cst.UnaryOperation):
                return
        if not epsilon_vanishes(value) or scope.is_guarded(node):
            return
        parent = scope.parent.get(node)
        meets = False
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, (cst.Add, cst.Subtract)):
            meets = scope.kind(arithmetic_root(scope, node), region) is Kind.TENSOR
        elif isinstance(parent, cst.Arg) and parent.keyword is None:
            call = scope.parent.get(parent)
            op = _op(self.context.resolve(call.func)) if isinstance(call, cst.Call) else None
            if op and op.split(".")[-1] in ("maximum", "add", "clip_by_value"):
                meets = any(scope.kind(a.value, region) is Kind.TENSOR for a in call.args if a is not parent)
        if meets:
            self._report_epsilon(node, literal, value)

    def _report_epsilon(self, node, literal, value: float, fix=None, what: str | None = None) -> None:
        spelled = what or self.context.code(node)
        self.report(
            node,
            f"{spelled} becomes {describe_float16(value)} in float16 (smallest normal ≈ 6.1e-5); "
            f"use {SAFE_EPSILON} or compute in float32",
            fix=fix if fix is not None else {literal: cst.Float(SAFE_EPSILON)},
            description=f"Use the float16-representable epsilon {SAFE_EPSILON}",
        )

    def _check_call(self, scope, call: cst.Call, region: Region) -> None:
        resolved = self.context.resolve(call.func)
        if resolved in _L2_NORMALIZE:
            self._check_l2_normalize(scope, call, region)
            return
        for arg in call.args:
            if arg.keyword is None or arg.keyword.value not in _EPSILON_KEYWORDS:
                continue
            value = number(arg.value)
            if value is None or not epsilon_vanishes(value):
                continue
            if _op(resolved) is None:
                if region.kind != "module":  # module-level constructors: see visit_Module
                    self._check_constructor(call, arg, value, resolved)
                continue
            # A TF op such as tf.nn.batch_normalization(..., variance_epsilon=1e-12).
            if region.kind == "module" or not call.args or scope.kind(call.args[0].value, region) is not Kind.TENSOR:
                continue
            self._report_epsilon(arg, arg.value, value, what=f"`{arg.keyword.value}={self.context.code(arg.value)}`")

    def _check_constructor(self, call: cst.Call, arg: cst.Arg, value: float, resolved: str | None) -> None:
        func = call.func
        simple = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if not simple[:1].isupper() or _NOT_LAYERS.search(resolved or simple):
            return
        if resolved and resolved.startswith("keras."):
            layer = resolved.split(".")[-1]
            if layer in _UPCASTING_KERAS_LAYERS or (layer == "GroupNormalization" and self.context.keras == 3):
                return
            if not resolved.startswith("keras.layers."):
                return
        scope = float16_scope(self.context)
        defined = scope.classes.get(simple) if isinstance(func, cst.Name) else None
        if defined is not None:
            if "float32" in self.context.code(defined):
                return  # the class computes in float32 itself
        elif not (resolved or "").startswith("keras.") and not _NORM_LAYER_NAME.search(simple):
            return  # an imported class we cannot see: only normalisation layers use epsilon directly
        dtype = argument(call, "dtype", None)
        if dtype is not None and re.search(r"float32|float64", self.context.code(dtype.value)):
            return
        accepts_dtype = defined is None or _accepts_dtype(defined)
        if accepts_dtype and dtype is None:
            new_args = list(call.args)
            last = new_args[-1]
            new_args[-1] = last.with_changes(comma=cst.MaybeSentinel.DEFAULT) if last.comma is cst.MaybeSentinel.DEFAULT else last
            new_args.append(cst.Arg(keyword=cst.Name("dtype"), value=cst.SimpleString('"float32"'),
                                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
            fix = {call: call.with_changes(args=new_args)}
            self.report(
                arg,
                f"`{arg.keyword.value}={self.context.code(arg.value)}` becomes {describe_float16(value)} in float16; "
                f"build the layer with `dtype=\"float32\"` (or use {SAFE_EPSILON})",
                fix=fix,
                description="Build the layer with dtype=\"float32\"",
            )
        else:
            self._report_epsilon(arg, arg.value, value, what=f"`{arg.keyword.value}={self.context.code(arg.value)}`")

    def _check_l2_normalize(self, scope, call: cst.Call, region: Region) -> None:
        if region.kind == "module" or not call.args:
            return
        x = call.args[0].value
        if scope.kind(x, region) is not Kind.TENSOR:
            return
        eps = argument(call, "epsilon", 2)
        value = number(eps.value) if eps is not None else 1e-12
        if value is None or not epsilon_vanishes(value):
            return
        fix = None
        imports: tuple[str, ...] = ()
        if is_simple(x):
            tf, imports = tf_spelling(self.context)
            inner = call.with_changes(args=[call.args[0].with_changes(
                value=cst.parse_expression(f"{tf}.cast({self.context.code(x)}, {tf}.float32)")), *call.args[1:]])
            outer = cst.parse_expression(f"{tf}.cast(__inner__, {self.context.code(x)}.dtype)")
            fix = {call: outer.with_changes(args=[outer.args[0].with_changes(value=inner), outer.args[1]])}
        what = "its default epsilon 1e-12" if eps is None else f"`epsilon={self.context.code(eps.value)}`"
        self.report(
            call,
            f"`l2_normalize` on a float16 tensor: {what} becomes {describe_float16(value)} in float16, "
            "so a zero vector gives NaN; normalise in float32 and cast back",
            fix=fix,
            imports=imports,
            description="Normalise in float32 and cast back to the input's dtype",
        )


def _accepts_dtype(cls: cst.ClassDef) -> bool:
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "__init__":
            params = stmt.params
            return isinstance(params.star_kwarg, cst.Param) or any(
                p.name.value == "dtype" for p in [*params.params, *params.kwonly_params])
    return True  # inherits Layer.__init__, which takes dtype
