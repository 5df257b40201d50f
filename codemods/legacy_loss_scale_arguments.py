"""MP302: `LossScaleOptimizer` arguments of another TensorFlow/Keras version.

``loss_scale=`` (TF ≤ 2.3) is a TypeError or ValueError in both Keras generations, and
Keras 2's ``dynamic=False`` is refused by Keras 3. The rewrite depends on the generation,
so it is code here; what an old loss scale meant is read by ``_loss_scale_intent``.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods import _api_table as table
from mpfix.codemods._loss_scale_intent import loss_scale_intent
from mpfix.codemods.base import Fact, Invalid, Valid
from mpfix.codemods._mp_api_support import ApiDriftRule, bool_value, find_arg, number_value, rewrite_args, string_value
from mpfix.findings import FixSafety

_LSO_NAMES = (*table.LSO_SPELLINGS, f"{table.EXPERIMENTAL}.LossScaleOptimizer")


class LegacyLossScaleArguments(ApiDriftRule):
    code = "MP302"
    fix_needs_tf = table.STABLE_SINCE
    name = "legacy-loss-scale-arguments"
    uses = frozenset({Fact.VERSION_GUARDS, Fact.DECLARED_TF})
    message = ("`LossScaleOptimizer` argument from another Keras generation; write the form the installed "
               "Keras accepts")
    messages = {
        "dynamic_flag": ("Keras 3's `LossScaleOptimizer` has no `dynamic` argument: the second positional argument is "
                         "`initial_scale`"),
        "dynamic_false": ("Keras 3's `LossScaleOptimizer` refuses `dynamic=False`; it always scales dynamically (for a "
                          "fixed scale set `loss_scale_factor=` on the inner optimizer)"),
        "unreadable": ("`LossScaleOptimizer` no longer takes {argument}; mpfix cannot read this loss scale: use "
                       "`LossScaleOptimizer(opt)` for a dynamic scale or set `initial_scale=`"),
        "legacy": "`LossScaleOptimizer` no longer takes {argument}",
        "legacy_fixed_on_keras3": ("`LossScaleOptimizer` no longer takes {argument}; Keras 3 has no fixed scale here: "
                                   "it starts a dynamic scale at `initial_scale`"),
    }
    notes = {"lost": "{lost}"}  # what the rewrite cannot keep (_loss_scale_intent.Intent.lost)
    fix_safety = FixSafety.SAFE
    triggers = ("LossScaleOptimizer",)
    explanation = """
        ## What it does
        Finds `LossScaleOptimizer` calls written for another TensorFlow/Keras version:
        `loss_scale="dynamic"` / `loss_scale=N` / `loss_scale=DynamicLossScale(...)`, the
        TF ≤ 2.3 positional `LossScaleOptimizer(opt, "dynamic")`, and on Keras 3 the Keras 2
        `dynamic=False` form and a positional `dynamic` flag.

        ## Why is this bad?
        Keras 3's constructor is `(inner_optimizer, initial_scale=32768.0, dynamic_growth_steps=2000)`,
        Keras 2's is `(inner_optimizer, dynamic=True, initial_scale=None, dynamic_growth_steps=None)`.
        `loss_scale=` is a `TypeError` (Keras 2) or `ValueError` (Keras 3). A positional `"dynamic"`
        is a `TypeError` in Keras 2, and in Keras 3 it is silently taken as `initial_scale` and
        fails at the first step (string cast to float). Keras 3 refuses `dynamic=False`.

        ## Example
        ```python
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, loss_scale="dynamic")
        fixed = tf.keras.mixed_precision.LossScaleOptimizer(opt, loss_scale=1024)
        ```

        ## Use instead
        ```python
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
        # Keras 2: a fixed scale
        fixed = tf.keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False, initial_scale=1024)
        # Keras 3: no fixed scale in the LossScaleOptimizer; this starts a dynamic scale at 1024
        fixed = tf.keras.mixed_precision.LossScaleOptimizer(opt, initial_scale=1024)
        ```

        ## Fix safety
        Safe: the code it replaces cannot run on the target generation. On Keras 3 a fixed scale
        becomes a dynamic scale that starts at the same value (for a truly fixed scale, set
        `loss_scale_factor=N` on the inner optimizer and drop the LossScaleOptimizer).
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            tuned = tf.keras.mixed_precision.LossScaleOptimizer(opt, initial_scale=2**10, dynamic_growth_steps=500)
        """),
        Valid("""
            import tensorflow as tf

            fixed = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(), dynamic=False, initial_scale=128)
            also_fixed = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(), False, 128)
        """, keras=2),
        Valid("""
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(), 1024)
        """, keras=3),
        # Code importing tf_keras is Keras 2 wherever it runs.
        Valid("""
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(), dynamic=False, initial_scale=64)
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(), loss_scale="dynamic")
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            """,
        ),
        # TF 2.3 positional form, aliased import.
        Invalid(
            """
            from tensorflow.keras.mixed_precision import LossScaleOptimizer as LSO

            opt = LSO(opt, "dynamic")
            """,
            """
            from tensorflow.keras.mixed_precision import LossScaleOptimizer as LSO

            opt = LSO(opt)
            """,
        ),
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(
                opt,  # the inner optimizer
                loss_scale=1024,  # fixed
            )
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(
                opt,  # the inner optimizer
                initial_scale=1024,  # fixed
            )
            """,
            keras=3,
        ),
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(
                opt,  # the inner optimizer
                loss_scale=1024,  # fixed
            )
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(
                opt,  # the inner optimizer
                dynamic=False, initial_scale=1024,  # fixed
            )
            """,
            keras=2,
        ),
        Invalid(
            """
            from tensorflow.keras import mixed_precision

            opt = mixed_precision.LossScaleOptimizer(opt, dynamic=False, initial_scale=256)
            """,
            """
            from tensorflow.keras import mixed_precision

            opt = mixed_precision.LossScaleOptimizer(opt, initial_scale=256)
            """,
            keras=3,
        ),
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, 512)
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False, initial_scale=512)
            """,
            keras=2,
        ),
        # TF 2.2-era tuned dynamic scale.
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, loss_scale=tf.mixed_precision.experimental.DynamicLossScale(initial_loss_scale=2**12, increment_period=500))
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, initial_scale=2**12, dynamic_growth_steps=500)
            """,
        ),
        # A loss scale mpfix cannot read: reported, not guessed.
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, loss_scale=config.loss_scale)
            """,
        ),
        # Keras 2's positional `dynamic` flag, which Keras 3 reads as `initial_scale`.
        Invalid(
            """
            import keras

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(), False)
            """,
            """
            import keras

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())
            """,
            keras=3,
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        resolved = self.context.resolve(node.func)
        if resolved not in _LSO_NAMES:
            return
        keras = self.context.keras
        # The experimental LSO's second argument was ``loss_scale`` in both generations' days.
        experimental = resolved != table.LSO
        legacy = find_arg(node, keyword=table.LEGACY_LSO_KEYWORD)
        positional = find_arg(node, position=1)
        if legacy is not None:
            self._legacy_loss_scale(node, *legacy)
        elif positional is not None and string_value(positional[1].value) is not None:
            self._legacy_loss_scale(node, *positional)
        elif positional is not None and (keras == table.KERAS2 or experimental) and (
                number_value(positional[1].value) is not None):
            self._legacy_loss_scale(node, *positional)
        elif keras == table.KERAS3 and positional is not None and bool_value(positional[1].value) is not None:
            index, arg = positional
            # Dropping the Keras 2 ``dynamic`` flag moves the scale into Keras 3's ``initial_scale`` slot.
            self.report(arg, "dynamic_flag",
                        fix={node: rewrite_args(node, {index: []})}, description="Drop the `dynamic` flag")
        elif keras == table.KERAS3:
            dynamic = find_arg(node, keyword="dynamic")
            if dynamic is not None and bool_value(dynamic[1].value) is False:
                index, arg = dynamic
                has_initial = find_arg(node, keyword="initial_scale", position=1) is not None
                fix = {node: rewrite_args(node, {index: []})} if has_initial else None
                self.report(arg, "dynamic_false", fix=fix, description="Drop `dynamic=False`")

    def _legacy_loss_scale(self, node: cst.Call, index: int, arg: cst.Arg) -> None:
        intent = loss_scale_intent(arg.value)
        spelled = "positional `\"dynamic\"`" if arg.keyword is None else "`loss_scale=`"
        if intent is None:
            self.report(arg, "unreadable", argument=spelled)
            return
        keras = self.context.keras
        variant = "legacy_fixed_on_keras3" if intent.fixed is not None and keras == table.KERAS3 else "legacy"
        lost = {"note": "lost", "lost": intent.lost} if intent.lost else {}
        self.report(arg, variant, argument=spelled, **lost, fix={node: rewrite_args(node, {index: intent.arguments(keras)})},
                    description=f"Rewrite for Keras {keras}")
