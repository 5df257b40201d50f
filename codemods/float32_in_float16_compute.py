"""MP206: float32 tensors made by hand inside a layer's float16 compute (no implicit promotion)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._float16_scope import cast
from mpfix.codemods.base import Fact, FixAvailability, Invalid, Need, Rule, Valid
from mpfix.codemods.facts.dtype_facts import DtypeFacts, Mix, dtype_facts, facts_for
from mpfix.codemods.facts.ops import FLOAT32_TRIGGERS
from mpfix.cst_replace import Replace
from mpfix.findings import FixSafety


class HardcodedFloat32InFloat16Compute(Rule):
    code = "MP206"
    name = "hardcoded-float32-in-float16-compute"
    uses = frozenset({Fact.DTYPES})
    message = "float32 tensor mixed into float16 compute inside `call` (InvalidArgumentError); use `self.compute_dtype`"
    messages = {
        "mix": ("`{expression}` is {dtype} and meets a float16 tensor under mixed_float16 (InvalidArgumentError: no "
                "implicit promotion); use `self.compute_dtype`"),
        "output_mix": ("`{expression}` is {dtype} and meets `{value}`, float16 from `{model}` (a Keras model/layer "
                       "built here) under mixed_float16: TypeError, no implicit promotion; cast `{value}` to float32"),
        "model_mix": ("`{expression}` is {dtype} and meets `{model}`, the float16 output of a Keras model under "
                      "mixed_float16 (InvalidArgumentError: no implicit promotion); cast one to the other's dtype"),
    }
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.SOMETIMES
    requires_float16 = True
    needs = frozenset({Need.FLOAT16_REGION})  # reports only in a float16 dtype region (the parse gate)
    # Generated from the one table of ops (facts.ops: creators and casts), so the
    # prefilter and the inference cannot disagree.
    # trainable_weights: float32 variables in a loss; autocast=False: a Keras 3 variable that stays float32 in `call`.
    triggers = (*FLOAT32_TRIGGERS, "sqrt", "trainable_", "autocast")
    # Layer methods (call and what it calls), or a float32 accumulator that meets a Keras model's output in a
    # function handed the model (research DELF: `descriptors = tf.concat([descriptors, net(x)], 0)`).
    # Or a training step (a tape), where a model built here meets a float32 tensor in the loss. Or a traced function
    # whose input_signature makes a parameter float32 (an exporter's tf.Module comparing a held model's scores with it).
    also_requires = (("def call", "concat(", "+=", "GradientTape", "input_signature"),)
    explanation = """
        ## What it does
        Inside a layer's `call` (and the methods it calls), finds arithmetic between a tensor
        that follows the layer's compute dtype and one made float32 by hand:
        `tf.cast(d, tf.float32)`, `tf.constant(2.0)`, `tf.ones(shape)`, `ops.arange(n, dtype="float32")`,
        `tf.cast(e, self.dtype)` (a layer's `dtype` is its float32 variable dtype). Keras 3 autocasts
        every floating argument of `call`, tf_keras only the first; float32 with float32 (a rotary
        embedding's `arange(...) / cast(dim, "float32")`) is a deliberate float32 island, and a
        fix that would turn such an island into a mix is not offered.

        Also, in a function handed a Keras model (a caller passes one, or the function reads an
        attribute only the project's Keras model class defines, `net.meta`), a float32 tensor that
        meets the model's output: `tf.concat([descriptors, net(x)], 0)` with `descriptors =
        tf.zeros(...)`. There no fix is offered: such a function has no `self.compute_dtype`, and a
        float16 accumulator would only move the mix (and float16 sums) further down.

        And in a training step or a loss, a value computed from the output of a model or layer
        built in this file (float16 by the layer table, not by a guess) that meets a tensor made
        float32 by hand (a cast, `dtype=tf.float32`, the float32 weights): `per_token * mask`
        with `mask = tf.sequence_mask(lengths, n, dtype=tf.float32)`. The fix casts the float16
        side to float32, as the Keras mixed-precision guide casts a model's outputs for the loss.

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
        # A training step: the float16 output of a model built here meets a float32 mask (TypeError).
        Invalid(
            """
            import tensorflow as tf

            model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4)])

            @tf.function
            def train_step(x, valid):
                with tf.GradientTape() as tape:
                    err = tf.square(model(x))
                    loss = tf.reduce_sum(err * tf.cast(valid, tf.float32))
                return tape.gradient(loss, model.trainable_variables)
            """,
            """
            import tensorflow as tf

            model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4)])

            @tf.function
            def train_step(x, valid):
                with tf.GradientTape() as tape:
                    err = tf.square(model(x))
                    loss = tf.reduce_sum(tf.cast(err, tf.float32) * tf.cast(valid, tf.float32))
                return tape.gradient(loss, model.trainable_variables)
            """,
            policy="mixed_float16",
        ),
        # A function handed the model (``net.meta``: only GlobalNet defines it): reported, no fix.
        Invalid(
            """
            import tensorflow as tf

            class GlobalNet(tf.keras.Model):
                def __init__(self, dim):
                    super().__init__()
                    self.dense = tf.keras.layers.Dense(dim)
                    self.meta = {"outputdim": dim}

                def call(self, x):
                    return self.dense(x)

            def extract(net, images):
                descriptors = tf.zeros((0, net.meta["outputdim"]))
                for image in images:
                    descriptors = tf.concat([descriptors, net(image)], 0)
                return descriptors
            """,
            policy="mixed_float16",
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        facts = dtype_facts(self.context)
        for mix in facts.mixes():
            if mix.model is not None:
                self._report_output_mix(facts, mix)
                continue
            place = facts.place(mix.node)
            if place is not None and not place.layer_method:
                # A module function handed a Keras model: no `self.compute_dtype` there, and a float16
                # accumulator would move the mix (and float16 sums) downstream: reported without a fix.
                self.report(mix.wide, "model_mix", expression=self.context.code(mix.wide),
                            dtype=mix.wide_dtype.value, model=self.context.code(mix.float16))
                continue
            self.report(mix.wide, "mix", expression=self.context.code(mix.wide), dtype=mix.wide_dtype.value,
                        fix=self._fix(facts, mix),
                        description="Use the layer's compute dtype")

    def _report_output_mix(self, facts: DtypeFacts, mix: Mix) -> None:
        """A training step or loss: the float16 side (computed from a model's output) is cast to float32, as the
        Keras mixed-precision guide casts a model's outputs for the loss; not where it is an ``x op= y`` target."""
        fix, imports = None, ()
        if not isinstance(mix.node, cst.AugAssign) or mix.float16 is not mix.node.target:
            converted, imports = cast(self.context, mix.float16, "float32")
            fix = {mix.float16: converted}
            if not _removes_only(facts, mix, fix):
                fix, imports = None, ()
        self.report(mix.wide, "output_mix", expression=self.context.code(mix.wide), dtype=mix.wide_dtype.value,
                    value=self.context.code(mix.float16), model=self.context.code(mix.model), fix=fix, imports=imports,
                    description="Cast the float16 value to float32")

    def _fix(self, facts: DtypeFacts, mix: Mix) -> dict | None:
        """The source call's dtype made the compute dtype, when that removes this mix and makes no other.

        No fix for a deliberate float32 upcast (``tf.cast(x, tf.float32)`` of a float16 value, an
        RMSNorm's variance): turning it back into float16 restores the overflow the cast prevents.
        """
        source = facts.float32_source(mix.wide)
        if source is None or source.deliberate:
            return None
        replacement = cst.parse_expression("self.compute_dtype")
        if source.dtype_arg is not None:
            fix = {source.dtype_arg.value: replacement}
        else:
            fix = {source.call: source.call.with_changes(args=[*source.call.args, cst.Arg(
                keyword=cst.Name("dtype"), value=replacement,
                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))])}
        return fix if _removes_only(facts, mix, fix) else None


def _removes_only(facts: DtypeFacts, mix: Mix, fix: dict) -> bool:
    """Applied, ``fix`` leaves fewer mixes and no new one (a float32 island's other uses would become mixes)."""
    (old, new), = fix.items()
    try:
        fixed = facts.module.visit(Replace({old: new}, facts.module))  # deep_replace rebuilt every node: 1 s a fix
        after = [str(m) for m in facts_for(fixed, facts.keras).mixes()]
    except RecursionError:
        return False
    before = [str(m) for m in facts.mixes()]
    for text in after:
        if text not in before:
            return False
        before.remove(text)
    return str(mix) in before
