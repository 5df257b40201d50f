"""MP107 fixed-scale-applies-nonfinite: see the rule's explanation (`mpfix explain MP107`)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._api_table import LSO_SPELLINGS
from mpfix.codemods.base import Fact, Invalid, Rule, Valid
from mpfix.findings import FixSafety


class FixedScaleAppliesNonFinite(Rule):
    code = "MP107"
    name = "fixed-scale-applies-nonfinite"
    uses = frozenset()
    message = ("Keras 2 `LossScaleOptimizer(dynamic=False)` applies steps with inf/NaN gradients "
               "instead of skipping them; prefer the dynamic loss scale")
    fix_safety = FixSafety.NONE
    triggers = ("dynamic=False", "dynamic = False")
    keras_generations = (2,)
    explanation = """
        ## What it does
        Keras 2 only: finds `LossScaleOptimizer(..., dynamic=False)`.

        ## Why is this bad?
        With a fixed scale Keras 2 does not check the gradients: a step whose scaled gradients
        overflow float16 (max 65504) is applied, and the weights become inf/NaN for good. The
        dynamic scale skips such steps and halves the scale.

        ## Example
        ```python
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False, initial_scale=1024)
        ```

        ## Use instead
        ```python
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(opt)
        ```
        If a fixed scale is wanted, choose it well below the overflow point and guard the step
        with `tf.math.is_finite` checks.

        ## Fix safety
        Report only: a fixed scale may be deliberate (`mpfix apply --loss-scale N` writes one).
    """
    VALID = [
        Valid("""
            import tf_keras
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD())
        """),
    ]
    INVALID = [
        Invalid("""
            import tf_keras
            from tf_keras import mixed_precision as mp
            optimizer = mp.LossScaleOptimizer(tf_keras.optimizers.SGD(), dynamic=False, initial_scale=1024)
        """, keras=2),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.resolve(node.func) not in (*LSO_SPELLINGS, "keras.mixed_precision.experimental.LossScaleOptimizer"):
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "dynamic" \
                    and isinstance(arg.value, cst.Name) and arg.value.value == "False":
                self.report(arg)
