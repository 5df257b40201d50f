"""MP201: Python constants past float16's range (-1e9 masks) meeting float16 tensors."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import (
    FLOAT16_MAX, SAFE_MASK, argument, arithmetic_root, first_arg, folded, is_float_literal, number, reaching_value,
)
from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.base import Fact, FixAvailability, Invalid, Rule, Valid
from mpfix.codemods.facts import ops as op_table
from mpfix.codemods.facts.dtype_facts import DtypeFacts, dtype_facts
from mpfix.codemods.names import self_attribute
from mpfix.findings import FixSafety

_INF = float("inf")


def _makes_tensor(value: cst.BaseExpression) -> bool:
    """A call in the value: ``tf.Variable(20.0) ** 2`` is a tensor, ``2.0 ** 20`` a Python number."""
    return any(isinstance(n, cst.Call) for n in walk(value))


def _signed(value: float, magnitude: str) -> cst.BaseExpression:
    literal = cst.Float(magnitude)
    return cst.UnaryOperation(cst.Minus(), literal) if value < 0 else literal


class Float16OverflowConstant(Rule):
    code = "MP201"
    name = "float16-overflow-constant"
    uses = frozenset({Fact.DTYPES})
    message = "Constant beyond float16's range (65504) meets a float16 tensor and becomes inf; use -3e4 or compute in float32"
    messages = {
        # A number computed from small literals (`tf.Variable(20.0) ** 2 ** 2`): no one safe value to write.
        "computed": "`{expression}` is {value} and becomes {inf} in float16 (max 65504); `0 * inf` and `inf - inf` "
                    "give NaN; compute it in float32 or keep it below 65504",
        "literal": ("`{constant}` becomes {inf} in float16 (max 65504); `0 * inf` and softmax over all-inf rows give "
                    "NaN; use {safe}"),
        "named": ("`{constant}` (= {literal}) becomes {inf} in float16 (max 65504); `0 * inf` and softmax over all-inf "
                  "rows give NaN; use {safe}"),
    }
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.SOMETIMES  # a number computed from small literals has no one safe value
    requires_float16 = True
    # What the rule can flag: float literals past 65504 (1e5, 7e4, 100000.0), negative integers
    # past it (a name bound to -1000000) and dtype extremes (tf.float32.min). Infinities are not
    # float16's doing (-inf is -inf in float32 too). A plain integer literal is never flagged
    # (index arithmetic), so large ints do not pass a file to the parser. Each regex starts with
    # a literal and checks what comes before it with a lookbehind: a leading \d or \b makes re
    # try every position (0.8 s on tfm + keras, against 0.1 s).
    triggers = (
        re.compile(r"e(?<=\de)\+?0*(?:[4-9]|[1-9]\d)\b"),
        re.compile(r"E(?<=\dE)\+?0*(?:[4-9]|[1-9]\d)\b"),
        re.compile(r"\.(?:(?<=\d{6}\.)|(?<=[7-9]\d{4}\.)|(?<=6[6-9]\d{3}\.)|(?<=65[6-9]\d\d\.)|(?<=655[1-9]\d\.)"
                   r"|(?<=6550[5-9]\.)|(?<=\d_\d{3}\.))"),
        re.compile(r"-\s*(?:\d{6,}|[7-9]\d{4}|6[6-9]\d{3}|65[6-9]\d\d|655[1-9]\d|6550[5-9]|\d{1,3}(?:_\d{3})+)\b"),
        re.compile(r"float(?:32|64)\.m(?:in|ax)\b"),
        # A power of a literal exponent can compute a number past 65504 from small literals (C6).
        re.compile(r"\*\*\s*\(?\s*\d"),
    )
    explanation = """
        ## What it does
        Finds Python constants larger than float16's maximum (65504) — `-1e9`, `1e10`, `-1e30`,
        `tf.float32.min` — meeting a tensor that is float16 under `mixed_float16`: additive
        attention masks, `tf.where(mask, scores, -1e9)`, `ops.where(...)`, also when the constant
        arrives through a name, a module constant or a constructor default stored in an attribute
        (`def __init__(self, mask_value=-1e9)` … `self.mask_value`).

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
        (`tf.float16.min if x.dtype == tf.float16 else -1e9`), constants that only meet float32
        tensors, and infinities (`float("-inf")` is `-inf` in float32 as well) are left alone.

        ## Fix safety
        Unsafe: the constant changes, which also changes float32 runs if logits exceed 3e4.
    """
    VALID = [
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
        # -inf is -inf in float32 too: a fully masked row is NaN in any dtype, not float16's doing.
        Valid("""
            from keras import layers, ops

            class Pool(layers.Layer):
                def call(self, scores, mask):
                    return ops.softmax(ops.where(mask, scores, float("-inf")))
        """, policy="mixed_float16"),
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
        # The constant arrives as a constructor default stored in an attribute: the default changes.
        Invalid(
            """
            from keras import layers, ops

            class MaskedSoftmax(layers.Layer):
                def __init__(self, mask_value=-1e9, **kwargs):
                    super().__init__(**kwargs)
                    self.mask_value = mask_value

                def call(self, scores, mask):
                    return ops.softmax(ops.where(mask, scores, self.mask_value))
            """,
            """
            from keras import layers, ops

            class MaskedSoftmax(layers.Layer):
                def __init__(self, mask_value=-3e4, **kwargs):
                    super().__init__(**kwargs)
                    self.mask_value = mask_value

                def call(self, scores, mask):
                    return ops.softmax(ops.where(mask, scores, self.mask_value))
            """,
            policy="mixed_float16",
        ),
        # A number computed from small literals: no one safe value to write, no fix.
        Invalid(
            """
            import tensorflow as tf

            class Energy(tf.keras.layers.Layer):
                def call(self, x):
                    scale = 2.0 ** 20
                    return x * scale
            """,
            policy='mixed_float16',
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        # tf_keras hands a compiled loss the model's outputs as they are: float16 without a float32 head.
        facts = dtype_facts(self.context).assuming(Dtype.FLOAT16)
        self._fold_cache: dict = {}  # statement positions, kept for this file's folding
        for candidate in facts.nodes((cst.Name, cst.Attribute, cst.Float, cst.Call, cst.UnaryOperation,
                                      cst.BinaryOperation), module_level=True):
            parent = facts.parent(candidate)
            if isinstance(candidate, cst.BinaryOperation) or (isinstance(candidate, cst.Name) and parent is not None
                                                              and facts.constant(candidate) is None):
                self._computed(facts, candidate, parent)
                continue
            if (isinstance(candidate, cst.Name) or self_attribute(candidate) is not None) and parent is not None:
                if isinstance(parent, cst.Attribute) and parent.value is candidate:
                    continue  # `self` of `self.mask_value`
                constant = facts.constant(candidate)
                if constant is None or candidate is constant.literal or \
                        not isinstance(constant.literal, (cst.Float, cst.UnaryOperation)):
                    continue
                value, literal = constant.value, constant.literal
            elif isinstance(candidate, (cst.Float, cst.Call, cst.Attribute, cst.UnaryOperation)):
                if isinstance(parent, cst.UnaryOperation):
                    continue  # judged as part of -1e9
                value = number(candidate)
                if value is None or not is_float_literal(candidate):
                    continue
                literal = candidate
            else:
                continue
            if abs(value) <= FLOAT16_MAX or value in (_INF, -_INF) or facts.is_guarded(candidate):
                # An infinity is infinite in float32 too: what it does to a softmax is not float16's doing.
                continue
            if not self._meets_float16(facts, candidate):
                continue
            spelled = self.context.code(candidate)
            named = {} if candidate is literal else {"literal": self.context.code(literal)}
            self.report(
                candidate,
                "named" if named else "literal",
                constant=spelled,
                inf="-inf" if value < 0 else "inf",
                safe=f"{'-' if value < 0 else ''}{SAFE_MASK}",
                **named,
                fix={literal: _signed(value, SAFE_MASK)},
                description=f"Use the float16-safe constant {'-' if value < 0 else ''}{SAFE_MASK}",
            )

    def _computed(self, facts: DtypeFacts, node: cst.BaseExpression, parent: cst.CSTNode | None) -> None:
        """A number past 65504 computed from small literals (``beta = tf.Variable(20.0) ** 2`` then
        ``tf.cast(beta ** 2, x.dtype)``: 160000) that meets float16: reported without a fix."""
        if (isinstance(parent, cst.Attribute) and parent.value is node) or isinstance(parent, cst.AssignTarget):
            return  # `x.dtype`; an assignment's target
        if isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)) and \
                folded(facts, parent, self.context.resolve, cache=self._fold_cache) is not None:
            return  # judged as the whole expression (`beta ** 2`, not `beta`)
        if isinstance(node, cst.Name):
            value = reaching_value(facts, node, self._fold_cache)
            if value is None or facts.dtype_of(node) is Dtype.FLOAT16 or _makes_tensor(value):
                return  # a tensor: converted (and reported) where it was made, or a float32 mix (MP206)
        found = folded(facts, node, self.context.resolve, cache=self._fold_cache)
        if found is None or not found.floating or abs(found.value) <= FLOAT16_MAX or \
                found.value in (_INF, -_INF) or facts.is_guarded(node):
            return
        if not self._meets_float16(facts, node):
            return
        self.report(node, "computed", expression=self.context.code(node), value=f"{found.value:g}",
                    inf="-inf" if found.value < 0 else "inf")

    @staticmethod
    def _meets_augmented_target(facts: DtypeFacts, root: cst.CSTNode) -> bool:
        """``scores += (1.0 - mask) * -1e9``: the value meets ``scores``."""
        parent = facts.parent(root)
        return isinstance(parent, cst.AugAssign) and parent.value is root and \
            facts.dtype_of(parent.target) is Dtype.FLOAT16

    def _causal_select_into_softmax(self, facts: DtypeFacts, select: cst.Call) -> bool:
        """``scores = tf.where(band_part(ones, -1, k), scores, -1e9)`` read only by a softmax or sigmoid: every row
        keeps its first column, so no row is all -inf, and nothing multiplies the -inf (the exp makes it 0)."""
        condition = first_arg(select)
        if isinstance(condition, cst.Name):
            condition = facts.value_of(condition)
        band = op_table.known(self.context.resolve(condition.func)) if isinstance(condition, cst.Call) else None
        args = [a.value for a in condition.args if a.keyword is None] if band is not None else []
        if band is None or not band.has(op_table.Kind.BAND) or len(args) < 3 or number(args[1]) != -1 or \
                (number(args[2]) or 0) < -1 or number(args[2]) is None:
            return False
        ones = args[0]
        if isinstance(ones, cst.Name):
            ones = facts.value_of(ones)
        spec = op_table.known(self.context.resolve(ones.func)) if isinstance(ones, cst.Call) else None
        if spec is None or not spec.has(op_table.Kind.ONES):
            return False
        statement = facts.parent(select)
        place = facts.place(select)
        if not isinstance(statement, cst.Assign) or len(statement.targets) != 1 or place is None or \
                not isinstance(statement.targets[0].target, cst.Name) or place.function is None:
            return False
        name = statement.targets[0].target.value
        for read in walk(place.function):
            if type(read) is not cst.Name or read.value != name or any(a is select for a in facts.ancestors(read)):
                continue
            parent = facts.parent(read)
            if isinstance(parent, cst.AssignTarget):
                continue
            call = facts.parent(parent) if isinstance(parent, cst.Arg) else None
            kind = op_table.known(self.context.resolve(call.func)) if isinstance(call, cst.Call) else None
            # Only a probability: its exp makes -inf 0. A log-probability keeps -inf, and a cross-entropy's
            # one_hot * log_softmax(...) is then 0 * -inf = NaN.
            if kind is None or first_arg(call) is not read or not kind.has(op_table.Kind.PROBABILITY):
                return False
        return True

    def _meets_float16(self, facts: DtypeFacts, node: cst.CSTNode) -> bool:
        root = arithmetic_root(facts, node)
        if root is not node:
            # Climb until the constant meets a tensor: `tf.cast(m, tf.float32) * 1e6` meets float32
            # first (fine in float32; mixing that with float16 is MP206's error, not an overflow).
            current = node
            while current is not root:
                parent = facts.parent(current)
                if isinstance(parent, cst.BinaryOperation):
                    sibling = parent.right if parent.left is current else parent.left
                    kind = facts.dtype_of(sibling)
                    if kind is Dtype.FLOAT16:
                        return True
                    if kind in (Dtype.INT, Dtype.BOOL, Dtype.COMPLEX, Dtype.BFLOAT16):
                        return False
                    if kind.wide:
                        # float32 here: if it goes on to meet float16 that is MP206's mix, and once
                        # MP206's fix makes it the compute dtype the next fix pass reports the constant.
                        return False
                current = parent
            return self._meets_augmented_target(facts, root)
        if self._meets_augmented_target(facts, node):
            return True
        parent = facts.parent(node)
        if isinstance(parent, cst.Arg):
            call = facts.parent(parent)
            if not isinstance(call, cst.Call):
                return False
            spec = op_table.lookup(self.context.resolve(call.func))
            if spec is None:
                return False
            if spec.has(op_table.Kind.ARITHMETIC, op_table.Kind.SELECT):
                # A mask constant meets the other tensor arguments elementwise (`where`'s condition excepted).
                others = [a.value for a in call.args if a is not parent and a.keyword is None]
                if spec.has(op_table.Kind.SELECT):
                    others = others[1:] if call.args and call.args[0] is not parent else others
                    if self._causal_select_into_softmax(facts, call):
                        return False
                return any(facts.dtype_of(o) is Dtype.FLOAT16 for o in others)
            if spec.result in (op_table.Result.CAST, op_table.Result.VALUE):
                # The op converts the constant to the dtype given next to it.
                dtype = argument(call, "dtype", 1 if spec.is_cast else None)
                return dtype is not None and facts.dtype_of_spelling(dtype.value, call) is Dtype.FLOAT16
        return False
