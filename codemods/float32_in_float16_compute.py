"""MP206: float32 tensors made by hand inside a layer's float16 compute (no implicit promotion)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._float16_scope import Dtype, Region, argument, dtype_analysis, first_arg
from mpfix.codemods.analysis import float32_ops
from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.findings import FixSafety


def _op(context, node: cst.BaseExpression) -> str | None:
    return float32_ops.op_name(context.resolve(node))


class _AugmentedPair:
    """``target op= value`` seen as the two operands MP206 compares."""

    def __init__(self, left: cst.BaseExpression, right: cst.BaseExpression) -> None:
        self.left, self.right = left, right


def _float32_source(scope, node: cst.BaseExpression, region: Region, context, depth: int = 0):
    """The call that makes ``node`` float32 and its dtype argument (None when implicit)."""
    if depth > 8:
        return None
    if isinstance(node, cst.Name):
        # `eps = tf.cast(e, tf.float32)` … `eps += learned`: the assignment that made it float32.
        values = [v for v in region.assigned.get(node.value, []) if id(v) not in region.augmented]
        return _float32_source(scope, values[0], region, context, depth + 1) if len(values) == 1 else None
    if isinstance(node, cst.BinaryOperation):
        for side in (node.left, node.right):
            if scope.dtype(side, region).wide:
                return _float32_source(scope, side, region, context, depth + 1)
        return None
    if not isinstance(node, cst.Call):
        return None
    op = _op(context, node.func) or ""
    short = op.split(".")[-1]
    if op in float32_ops.CAST_OPS or short in ("cast", "saturate_cast"):
        dtype = argument(node, "dtype", 1)
        return (node, dtype) if dtype is not None else None
    if op in float32_ops.FLOAT_CREATORS or op in float32_ops.RANGE_OPS or op in float32_ops.LIKE_OPS:
        return node, argument(node, "dtype", None)
    first = first_arg(node)
    return _float32_source(scope, first, region, context, depth + 1) if first is not None else None


class HardcodedFloat32InFloat16Compute(Rule):
    code = "MP206"
    name = "hardcoded-float32-in-float16-compute"
    message = "float32 tensor mixed into float16 compute inside `call` (InvalidArgumentError); use `self.compute_dtype`"
    fix_safety = FixSafety.UNSAFE
    requires_float16 = True
    # Generated from the one table of float32-creating ops (analysis.float32_ops), so the
    # prefilter and the inference cannot disagree.
    triggers = (*float32_ops.FLOAT32_TRIGGERS, "sqrt")
    also_requires = ("def call",)  # only layer methods: call and what it calls
    explanation = """
        ## What it does
        Inside a layer's `call` (and the methods it calls), finds arithmetic between a tensor
        that follows the layer's compute dtype and one made float32 by hand:
        `tf.cast(d, tf.float32)`, `tf.constant(2.0)`, `tf.ones(shape)`, `ops.arange(n, dtype="float32")`,
        `tf.cast(e, self.dtype)` (a layer's `dtype` is its float32 variable dtype). Keras 3 autocasts
        every floating argument of `call`, tf_keras only the first; float32 with float32 (a rotary
        embedding's `arange(...) / cast(dim, "float32")`) is a deliberate float32 island, and a
        fix that would turn such an island into a mix is not offered.

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
        # A float32 island by design (rotary embeddings, anchor generators): float32 with float32.
        Valid("""
            from keras import layers, ops

            class Rotary(layers.Layer):
                def call(self, x):
                    dim = ops.shape(x)[-1]
                    idx = ops.arange(0, dim, 2, dtype="float32")
                    denom = ops.cast(dim, "float32")
                    freqs = 1.0 / (10000.0 ** (idx / denom))
                    return x * ops.cast(freqs, x.dtype)
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
        scope = dtype_analysis(self.context)
        for binop, region in list(scope.region_of.items()):
            if not region.layer_method or not isinstance(binop, (cst.BinaryOperation, cst.AugAssign)):
                continue
            if isinstance(binop.operator, (cst.BitAnd, cst.BitOr, cst.BitXor, cst.LeftShift, cst.RightShift,
                                           cst.BitAndAssign, cst.BitOrAssign, cst.BitXorAssign)):
                continue
            if isinstance(binop, cst.AugAssign):
                # `logits += -1e9 * (1.0 - mask32)`: the target keeps the layer's float16.
                left, right = scope.dtype(binop.target, region), scope.dtype(binop.value, region)
                binop = _AugmentedPair(binop.target, binop.value)
            else:
                left, right = scope.dtype(binop.left, region), scope.dtype(binop.right, region)
            if not ((left.wide and right is Dtype.FLOAT16) or (right.wide and left is Dtype.FLOAT16)):
                continue
            f32 = binop.left if left.wide else binop.right
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
            if fix is not None and self._fix_mixes(scope, region, source[0], binop):
                fix = None
            self.report(f32, f"`{self.context.code(f32)}` is {(left if left.wide else right).value} and meets a float16 "
                             "tensor under mixed_float16 (InvalidArgumentError: no implicit promotion); use "
                             "`self.compute_dtype`", fix=fix, description="Use the layer's compute dtype")

    def _fix_mixes(self, scope, region: Region, source: cst.Call, binop: cst.BinaryOperation) -> bool:
        """The fix would make a new mix: the float32 value also meets other float32 values (a float32 island)."""
        # Where the changed value is a name, every other use of that name with a float32 operand
        # would become float16 * float32 after the fix (`idx / denom`, both float32 by design).
        parent = scope.parent.get(source)
        names = set()
        while isinstance(parent, (cst.Arg, cst.Call, cst.BinaryOperation, cst.UnaryOperation)):
            parent = scope.parent.get(parent)
        if isinstance(parent, cst.Assign):
            names = {t.target.value for t in parent.targets if isinstance(t.target, cst.Name)}
        for other in region.binops:
            if other is binop:
                continue
            for mine, theirs in ((other.left, other.right), (other.right, other.left)):
                if isinstance(mine, cst.Name) and mine.value in names and scope.dtype(theirs, region).wide:
                    return True
        return False
