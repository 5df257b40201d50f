"""MP112 tf1-loop-without-loss-scaling: a TF1 optimizer's compute_gradients/minimize loop under mixed_float16, unscaled."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.gradient_path import GradientKind, training_steps
from mpfix.codemods.base import Fact, Invalid, Rule, Valid
from mpfix.findings import FixSafety
from mpfix.policy import Policy

_WRAPPER = "compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer"


class Tf1LoopWithoutLossScaling(Rule):
    code = "MP112"
    name = "tf1-loop-without-loss-scaling"
    uses = frozenset({Fact.GRADIENT_PATH})
    message = ("TF1 optimizer (`compute_gradients`/`apply_gradients`/`minimize`) under mixed_float16 without "
               "loss scaling: wrap it in `tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`")
    fix_safety = FixSafety.UNSAFE
    triggers = ("compat.v1.train.", "tf.train.")
    also_requires = ("Optimizer",)
    requires_float16 = True
    explanation = """
        ## What it does
        In a file that sets a `mixed_float16` policy, finds TF1 optimizers (`tf.compat.v1.train.MomentumOptimizer`
        and friends) whose gradients are taken with `compute_gradients` or `minimize` in this file,
        with no `MixedPrecisionLossScaleOptimizer` (or graph-rewrite) wrapped around them.

        ## Why is this bad?
        Keras' LossScaleOptimizer cannot wrap a TF1 optimizer, and nothing else scales the loss:
        the float16 gradients underflow to zero as in any unscaled loop (most entries exactly 0 in
        a small model), and training crawls without an error.

        ## Example
        ```python
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        opt = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9)
        grads_and_vars = opt.compute_gradients(loss_fn, var_list=model.trainable_variables)
        opt.apply_gradients(grads_and_vars)
        ```

        ## Use instead
        ```python
        opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
            tf.compat.v1.train.MomentumOptimizer(0.01, 0.9), "dynamic")
        ```
        Its `compute_gradients` scales the loss and unscales the gradients; its `apply_gradients`
        skips steps with non-finite gradients and adjusts the scale.

        ## Fix safety
        Unsafe (the numbers change, on purpose). Only where the loop uses the optimizer's own
        `compute_gradients`/`minimize`: with a `GradientTape` the wrapper would not scale the loss, so
        such loops are reported without a fix.
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
                tf.compat.v1.train.MomentumOptimizer(0.01, 0.9), "dynamic")
            opt.apply_gradients(opt.compute_gradients(loss_fn, var_list=model.trainable_variables))
        """),
        # float32: nothing to scale.
        Valid("""
            import tensorflow as tf
            opt = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9)
            opt.minimize(loss_fn, var_list=model.trainable_variables)
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            opt = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9)
            for _ in range(steps):
                grads_and_vars = opt.compute_gradients(loss_fn, var_list=model.trainable_variables)
                opt.apply_gradients(grads_and_vars)
            """,
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(tf.compat.v1.train.MomentumOptimizer(0.01, 0.9), "dynamic")
            for _ in range(steps):
                grads_and_vars = opt.compute_gradients(loss_fn, var_list=model.trainable_variables)
                opt.apply_gradients(grads_and_vars)
            """,
        ),
        Invalid(
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
            """,
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), "dynamic")
            train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
            """,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        # A Keras policy only reaches Keras layers; TF1 graph code elsewhere in a project that uses
        # mixed_float16 (estimator model_fns, tf.compat.v1.layers) usually computes in float32. So the
        # file itself must set (or name) the float16 policy.
        if self.context.policy is not Policy.FLOAT16 or self.context.module_policy is not Policy.FLOAT16:
            return
        analysis = training_steps(self.context)
        wrapped: set[str] = set()
        for build in analysis.builds:
            if build.is_v1_lso:
                inner = build.inner()
                wrapped.add(self.context.code(inner) if inner is not None else "")
                wrapped.add(build.target)
        if any(b.is_v1_lso and b.inner() is None for b in analysis.builds):
            return
        # Which optimizers take their own gradients (compute_gradients / minimize) and which use a tape.
        own: set[str] = set()
        for flow in analysis.flows:
            if flow.gradient.kind is GradientKind.COMPUTE_GRADIENTS and flow.gradient.optimizer:
                own.add(flow.gradient.optimizer)
        for _, call, _ in analysis.minimizes:
            own.add(call.optimizer)
        taped = {f.optimizer for f in analysis.flows if f.gradient.kind is not GradientKind.COMPUTE_GRADIENTS}
        for build in analysis.builds:
            if not build.is_v1 or build.is_v1_lso or build.target in wrapped:
                continue
            if build.target not in own and build.target not in taped:
                continue
            fix = None
            if build.target in own and build.target not in taped:
                tf = self.context.imports.local_name_for("tensorflow") or "tf"
                wrapper = cst.parse_expression(f"{tf}.{_WRAPPER}")
                fix = {build.call: cst.Call(func=wrapper, args=[
                    cst.Arg(build.call, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                    cst.Arg(cst.SimpleString('"dynamic"'))])}
            self.report(build.call, fix=fix, description="Wrap it in MixedPrecisionLossScaleOptimizer")
