"""MP202: epsilons below float16's range (1e-8) that vanish when they meet float16 tensors."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import (
    Dtype, Region, SAFE_EPSILON, argument, arithmetic_root, cast, describe_float16, dtype_analysis,
    epsilon_vanishes, is_simple, number,
)
from mpfix.codemods.analysis import float32_ops
from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.findings import FixSafety


_EPSILON_KEYWORDS = {"epsilon", "eps", "variance_epsilon", "norm_epsilon", "layer_norm_eps", "layer_norm_epsilon"}
_NOT_LAYERS = re.compile(r"optim|adam|rmsprop|adagrad|adadelta|adamax|nadam|ftrl|lamb|lion|sgd|lars|config|schedule|"
                         r"params|metric|loss", re.IGNORECASE)
_NORM_LAYER_NAME = re.compile(r"(Norm|Normalization|Normalize)$")
# Keras layers that compute in float32 under mixed_float16 whatever their epsilon (checked on
# Keras 2 and 3: LayerNormalization(epsilon=1e-12) stays finite on constant float16 rows).
_UPCASTING_KERAS_LAYERS = {"LayerNormalization", "BatchNormalization", "SyncBatchNormalization"}
_L2_NORMALIZE = {"tensorflow.math.l2_normalize", "tensorflow.nn.l2_normalize", "tensorflow.linalg.l2_normalize"}


def _op(resolved: str | None) -> str | None:
    return float32_ops.op_name(resolved)


def _is_self_attribute(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"


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
        scope = dtype_analysis(self.context)
        for candidate, region in list(scope.region_of.items()):
            if isinstance(candidate, cst.Call):
                self._check_call(scope, candidate, region)
            elif isinstance(candidate, (cst.Float, cst.Name)) or _is_self_attribute(candidate):
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
        if isinstance(node, cst.Name) or _is_self_attribute(node):
            if isinstance(scope.parent.get(node), cst.Attribute) and scope.parent[node].value is node:
                return  # `self` of `self.epsilon`
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
            meets = scope.dtype(arithmetic_root(scope, node), region) is Dtype.FLOAT16
        elif isinstance(parent, cst.Arg) and parent.keyword is None:
            call = scope.parent.get(parent)
            op = _op(self.context.resolve(call.func)) if isinstance(call, cst.Call) else None
            if op and op.split(".")[-1] in ("maximum", "add", "clip_by_value", "clip"):
                meets = any(scope.dtype(a.value, region) is Dtype.FLOAT16 for a in call.args if a is not parent)
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
            if region.kind == "module" or not call.args or scope.dtype(call.args[0].value, region) is not Dtype.FLOAT16:
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
        scope = dtype_analysis(self.context)
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
        if scope.dtype(x, region) is not Dtype.FLOAT16:
            return
        eps = argument(call, "epsilon", 2)
        value = number(eps.value) if eps is not None else 1e-12
        if value is None or not epsilon_vanishes(value):
            return
        fix = None
        imports: tuple[str, ...] = ()
        if is_simple(x):
            inner_x, imports = cast(self.context, x, "float32")
            inner = call.with_changes(args=[call.args[0].with_changes(value=inner_x), *call.args[1:]])
            outer, more = cast(self.context, inner, f"{self.context.code(x)}.dtype")
            imports = (*imports, *more)
            fix = {call: outer}
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
