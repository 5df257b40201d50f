"""MP202: epsilons below float16's range (1e-8) that vanish when they meet float16 tensors."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import (
    SAFE_EPSILON, argument, arithmetic_root, cast, describe_float16, epsilon_vanishes, first_arg, is_simple, number,
)
from mpfix.codemods.analysis.dtypes import Dtype, spelled_dtype
from mpfix.codemods.base import Fact, FixAvailability, Invalid, Rule, Valid
from mpfix.codemods.facts import heuristics, keras_layers
from mpfix.codemods.facts import ops as op_table
from mpfix.codemods.facts.dtype_facts import DtypeFacts, dtype_facts
from mpfix.codemods.names import self_attribute
from mpfix.findings import FixSafety


_EPSILON_KEYWORDS = {"epsilon", "eps", "variance_epsilon", "norm_epsilon", "layer_norm_eps", "layer_norm_epsilon"}


class Float16UnderflowEpsilon(Rule):
    code = "MP202"
    name = "float16-underflow-epsilon"
    uses = frozenset({Fact.DTYPES})
    message = "Epsilon below float16's range becomes 0 (or a lossy subnormal) in float16; use 1e-4 or compute in float32"
    messages = {
        "backend_epsilon": ("`{call}` (1e-7) becomes {float16} in float16 (smallest normal ≈ 6.1e-5); use "
                            "{safe_epsilon} for float16 or compute in float32"),
        "floor": ("{expression} becomes {float16} in float16 (smallest normal ≈ 6.1e-5), so the floor {lost}; use "
                  "{safe_epsilon} for float16 only (a floor is the value wherever the input is below it)"),
        "epsilon": "{epsilon} becomes {float16} in float16 (smallest normal ≈ 6.1e-5); use {safe_epsilon} or compute in float32",
        "parameter_default": ("`{epsilon}` defaults to {default}, which becomes {float16} in float16 (smallest normal "
                              "≈ 6.1e-5); compute in float32 (cast the inputs first): the default is every "
                              "caller's value"),
        "layer_by_name": ("{epsilon} becomes {float16} in float16 if `{layer}` computes in the compute dtype; build it "
                          "with `dtype=\"float32\"` (or use {safe_epsilon})"),
        "layer": ("{epsilon} becomes {float16} in float16; build the layer with `dtype=\"float32\"` (or use "
                  "{safe_epsilon})"),
        "near_one": ("upper bound `{bound}` is 1.0 in float16 (its spacing below 1 is 4.9e-4), so the clip leaves "
                     "probabilities of 1 and log(1 - p) is -inf; clip in float32 (cast the input first)"),
        "l2_normalize": ("`l2_normalize` on a float16 tensor: {epsilon} becomes {float16} in float16, so a zero vector "
                         "gives NaN; normalise in float32 and cast back"),
    }
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.SOMETIMES
    requires_float16 = True
    # Literals of 1e-6 and below (exponent or written out), and l2_normalize's default 1e-12.
    # Literal-led regexes with lookbehinds: same files as `\d[eE]-...`, 15x faster to search.
    triggers = (re.compile(r"e-(?<=\de-)0*(?:[6-9]|[1-9]\d)\b"), re.compile(r"E-(?<=\dE-)0*(?:[6-9]|[1-9]\d)\b"),
                re.compile(r"0\.00000\d"), "l2_normalize", "epsilon()")
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
        float32 too; `l2_normalize` is rewritten to run in float32 and cast back. A floor
        (`clip_by_value(x, 1e-10, 1.0)`, `maximum(x, 1e-12)`) is the value wherever `x` is below
        it, so it is raised for float16 only (`1e-4 if x.dtype == "float16" else 1e-10`). A layer
        known only by its imported name (`RMSNorm(epsilon=1e-12)`) gets no fix.
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
        # A parameter's default that no call in the file overrides (a loss tf_keras calls with two arguments, on
        # a float16 head): every caller's value, so no fix; compute the loss in float32.
        Invalid(
            """
            import os

            os.environ["TF_USE_LEGACY_KERAS"] = "1"
            import tensorflow as tf
            import tf_keras as keras

            keras.mixed_precision.set_global_policy("mixed_float16")


            def relative_error(y_true, y_pred, eps=1e-8):
                y_true = tf.cast(y_true, y_pred.dtype)
                return tf.abs(y_pred - y_true) / (tf.abs(y_true) + eps)


            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            model.compile("adam", loss=relative_error)
            """,
            keras=2,
        ),
        # A floor: raised for float16 only, since the floor is the value wherever the input is below it.
        Invalid(
            """
            import tensorflow as tf
            class A(tf.keras.layers.Layer):
                def call(self, x):
                    return x / tf.clip_by_value(x, 1e-10, 1.0)
            """,
            """
            import tensorflow as tf
            class A(tf.keras.layers.Layer):
                def call(self, x):
                    return x / tf.clip_by_value(x, (1e-4 if x.dtype == "float16" else 1e-10), 1.0)
            """,
            policy='mixed_float16',
        ),
        # `K.epsilon()` as a smoothing term: 1e-4 for every dtype would change float32 results, no fix.
        Invalid(
            """
            import tensorflow as tf
            from tensorflow.keras import backend as K

            class Dice(tf.keras.layers.Layer):
                def call(self, p, y):
                    inter = tf.reduce_sum(p * y)
                    return (2.0 * inter + K.epsilon()) / (tf.reduce_sum(p + y) + K.epsilon())
            """,
            policy='mixed_float16',
            count=2,
        ),
        # An imported layer that only its name says is a normalisation layer: no fix rests on a name.
        Invalid(
            """
            import tensorflow as tf
            from my_project.layers import RMSNorm
            def build():
                return RMSNorm(epsilon=1e-12)
            """,
            policy='mixed_float16',
        ),
        # The upper bound 1 - 1e-7 of a clip of float16 probabilities is 1.0 in float16: no fix.
        Invalid("""
            import tensorflow as tf

            class Bce(tf.keras.layers.Layer):
                def call(self, logits):
                    p = tf.clip_by_value(tf.sigmoid(logits), 1e-4, 1.0 - 1e-7)
                    return tf.math.log(1.0 - p)
        """, policy="mixed_float16"),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        # tf_keras hands a compiled loss the model's outputs as they are: float16 without a float32 head.
        facts = dtype_facts(self.context).assuming(Dtype.FLOAT16)
        for candidate in facts.nodes((cst.Call, cst.Float, cst.Name, cst.Attribute), module_level=True):
            if isinstance(candidate, cst.Call):
                self._check_call(facts, candidate)
                if not candidate.args and facts.constant(candidate) is not None:
                    self._check_additive(facts, candidate)  # keras.backend.epsilon(): 1e-7
            elif not isinstance(candidate, cst.Attribute) or self_attribute(candidate) is not None:
                self._check_additive(facts, candidate)
        for call in facts.all_calls:
            self._check_near_one(facts, call)
            place = facts.place(call)
            if place is None or not place.compute:
                # Layers are built in __init__, build() and model functions, outside any region.
                for arg in call.args:
                    if arg.keyword is not None and arg.keyword.value in _EPSILON_KEYWORDS:
                        value = number(arg.value)
                        resolved = self.context.resolve(call.func)
                        if value is not None and epsilon_vanishes(value) and op_table.op_name(resolved) is None:
                            self._check_constructor(facts, call, arg, value, resolved)

    def _check_near_one(self, facts: DtypeFacts, call: cst.Call) -> None:
        """``clip(p, eps, 1.0 - eps)`` on float16 p with eps <= 2**-12: float16 rounds the upper bound to 1.0, so a
        saturated sigmoid stays 1 and ``log(1 - p)`` is -inf (wave 11's tf_keras focal loss, eps = 1e-7). No fix:
        the float32 clip needs the input cast and its result's dtype decided by what follows."""
        spec = op_table.lookup(self.context.resolve(call.func))
        if spec is None or not spec.has(op_table.Kind.CLIP) or first_arg(call) is None:
            return
        upper = argument(call, "clip_value_max", 2) or argument(call, "x_max", 2)
        bound = upper.value if upper is not None else None
        if not (isinstance(bound, cst.BinaryOperation) and isinstance(bound.operator, cst.Subtract) and
                number(bound.left) == 1.0):
            return
        value = number(bound.right)
        if value is None:  # a name bound to a constant or to keras.backend.epsilon() (1e-7)
            named = facts.value_of(bound.right) if isinstance(bound.right, cst.Name) else None
            constant = facts.constant(bound.right) or (facts.constant(named) if named is not None else None)
            value = constant.value if constant is not None else None
        if value is None or not 0.0 < value <= 2.0 ** -12 or facts.dtype_of(first_arg(call)) is not Dtype.FLOAT16:
            return
        self.report(bound, "near_one", bound=self.context.code(bound))

    def _check_additive(self, facts: DtypeFacts, node) -> None:
        parent = facts.parent(node)
        if isinstance(node, cst.Name) or self_attribute(node) is not None:
            if isinstance(parent, cst.Attribute) and parent.value is node:
                return  # `self` of `self.epsilon`
            constant = facts.constant(node)
            if constant is None or constant.literal is node or not isinstance(constant.literal, cst.Float):
                return
            value, literal = constant.value, constant.literal
            if isinstance(parent, cst.AssignTarget):
                return
        elif isinstance(node, cst.Call):
            value, literal = facts.constant(node).value, node
        else:
            value, literal = number(node), node
            if value is None or isinstance(parent, cst.UnaryOperation):
                return
        if not epsilon_vanishes(value) or facts.is_guarded(node):
            return
        meets = False
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, (cst.Add, cst.Subtract)):
            meets = facts.dtype_of(arithmetic_root(facts, node)) is Dtype.FLOAT16
        elif isinstance(parent, cst.Arg) and parent.keyword is None:
            call = facts.parent(parent)
            spec = op_table.lookup(self.context.resolve(call.func)) if isinstance(call, cst.Call) else None
            if spec is not None and spec.has(op_table.Kind.ADD, op_table.Kind.FLOOR, op_table.Kind.CLIP):
                meets = any(facts.dtype_of(a.value) is Dtype.FLOAT16 for a in call.args if a is not parent)
                if meets and spec.has(op_table.Kind.FLOOR, op_table.Kind.CLIP):
                    self._report_floor(call, node, literal, value)
                    return
        if meets and isinstance(node, cst.Call):
            # keras.backend.epsilon() as a smoothing term (Dice, Tversky): 1e-4 for every dtype would
            # change float32 results (C24), so no fix.
            self.report(node, "backend_epsilon", call=self.context.code(node), float16=describe_float16(value),
                        safe_epsilon=SAFE_EPSILON)
        elif meets and isinstance(node, cst.Name) and isinstance(facts.parent(literal), cst.Param):
            # A parameter's default (a compiled loss's eps=1e-8) is every caller's value; 1e-4 there did not make
            # wave 15's SI-SDR loss train (log(ratio + 1e-4) under the loss scale: loss flat at 37.3 for 6
            # epochs), computing in float32 did: reported, no fix.
            self.report(node, "parameter_default", epsilon=self.context.code(node), default=self.context.code(literal),
                        float16=describe_float16(value))
        elif meets:
            self._report_epsilon(node, literal, value)

    def _report_floor(self, call: cst.Call, node, literal, value: float) -> None:
        """A floor (``clip_by_value(cumprod, 1e-10, 1.0)``, ``maximum(norm, 1e-12)``) is the value wherever the
        input is below it: raising it for every dtype changes float32 results (cumulative products fall
        below 1e-4 in ordinary use), so the fix raises it for float16 only, and needs the input by name."""
        clipped = first_arg(call)
        fix = None
        if clipped is not None and clipped is not node and is_simple(clipped):
            fix = {literal: cst.parse_expression(
                f'({SAFE_EPSILON} if {self.context.code(clipped)}.dtype == "float16" else {self.context.code(literal)})')}
        lost = "is gone" if describe_float16(value) == "0.0" else "is off"
        self.report(node, "floor", expression=self.context.code(node), float16=describe_float16(value), lost=lost,
                    safe_epsilon=SAFE_EPSILON, fix=fix,
                    description=f"Use {SAFE_EPSILON} as the floor in float16, the original value otherwise")

    def _report_epsilon(self, node, literal, value: float, fix=None, what: str | None = None) -> None:
        spelled = what or self.context.code(node)
        self.report(
            node,
            "epsilon",
            epsilon=spelled,
            float16=describe_float16(value),
            safe_epsilon=SAFE_EPSILON,
            fix=fix if fix is not None else {literal: cst.Float(SAFE_EPSILON)},
            description=f"Use the float16-representable epsilon {SAFE_EPSILON}",
        )

    def _check_call(self, facts: DtypeFacts, call: cst.Call) -> None:
        resolved = self.context.resolve(call.func)
        spec = op_table.lookup(resolved)
        place = facts.place(call)
        if spec is not None and spec.has(op_table.Kind.L2_NORMALIZE):
            self._check_l2_normalize(facts, call)
            return
        for arg in call.args:
            if arg.keyword is None or arg.keyword.value not in _EPSILON_KEYWORDS:
                continue
            value = number(arg.value)
            if value is None or not epsilon_vanishes(value):
                continue
            if spec is None:
                if place is not None and place.compute:  # module-level constructors: see visit_Module
                    self._check_constructor(facts, call, arg, value, resolved)
                continue
            # A TF op such as tf.nn.batch_normalization(..., variance_epsilon=1e-12).
            if not call.args or facts.dtype_of(call.args[0].value) is not Dtype.FLOAT16:
                continue
            self._report_epsilon(arg, arg.value, value, what=f"`{arg.keyword.value}={self.context.code(arg.value)}`")

    def _check_constructor(self, facts: DtypeFacts, call: cst.Call, arg: cst.Arg, value: float,
                           resolved: str | None) -> None:
        func = call.func
        simple = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        by_name_only = False
        if resolved and resolved.startswith("keras."):
            spec = keras_layers.layer(resolved, self.context.keras)
            if spec is not None and spec.computes_float32:
                return  # Keras' own LayerNormalization/BatchNormalization compute in float32
            if not resolved.startswith("keras.layers."):
                return
            info = None
        else:
            if not heuristics.is_constructor_name(simple) or heuristics.NOT_A_LAYER.search(resolved or simple):
                return
            defined = facts.class_named(simple) if isinstance(func, cst.Name) else None
            info = facts.layer(defined) if defined is not None else None
            if defined is not None and info is None and not heuristics.NORM_LAYER_NAME.search(simple):
                return  # a class of this file that is no layer
            if info is not None and info.computes_float32:
                return  # the class computes in float32 itself
            if defined is not None and facts.parameter_feeds_float32_layers(defined, arg.keyword.value):
                return  # the epsilon only reaches Keras' float32 normalisation layers
            if defined is None:
                if not heuristics.NORM_LAYER_NAME.search(simple):
                    return  # an imported class we cannot see: only normalisation layers use epsilon directly
                by_name_only = True
        dtype = argument(call, "dtype", None)
        if dtype is not None and (spelled_dtype(dtype.value, self.context.resolve) or Dtype.UNKNOWN).wide:
            return
        what = f"`{arg.keyword.value}={self.context.code(arg.value)}`"
        if by_name_only:
            # Only its name says it is a normalisation layer: no fix rests on a name.
            self.report(arg, "layer_by_name", epsilon=what, float16=describe_float16(value), layer=simple,
                        safe_epsilon=SAFE_EPSILON)
            return
        accepts_dtype = info is None or info.accepts_dtype
        if accepts_dtype and dtype is None:
            new_args = list(call.args)
            last = new_args[-1]
            new_args[-1] = last.with_changes(comma=cst.MaybeSentinel.DEFAULT) if last.comma is cst.MaybeSentinel.DEFAULT else last
            new_args.append(cst.Arg(keyword=cst.Name("dtype"), value=cst.SimpleString('"float32"'),
                                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
            self.report(
                arg,
                "layer",
                epsilon=what,
                float16=describe_float16(value),
                safe_epsilon=SAFE_EPSILON,
                fix={call: call.with_changes(args=new_args)},
                description="Build the layer with dtype=\"float32\"",
            )
        else:
            self._report_epsilon(arg, arg.value, value, what=what)

    def _check_l2_normalize(self, facts: DtypeFacts, call: cst.Call) -> None:
        place = facts.place(call)
        if place is None or not place.compute or not call.args:
            return
        x = call.args[0].value
        if facts.dtype_of(x) is not Dtype.FLOAT16:
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
            "l2_normalize",
            epsilon=what,
            float16=describe_float16(value),
            fix=fix,
            imports=imports,
            description="Normalise in float32 and cast back to the input's dtype",
        )
