"""MP104 scaled-loss-outside-tape: see the rule's explanation (`mpfix explain MP104`)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.gradient_path import Analysis, Flow, assigns_name, in_tape, names_in, training_steps
from mpfix.codemods._loss_scaling_support import fresh_name, loss_anchor, new_statement, scale_method, statement_index, statement_of
from mpfix.codemods.base import Fact, Invalid, Rule, Valid
from mpfix.findings import FixSafety


class ScaledLossOutsideTape(Rule):
    code = "MP104"
    name = "scaled-loss-outside-tape"
    uses = frozenset({Fact.GRADIENT_PATH})
    message = "The scaled loss is computed where the tape does not record it; compute it inside the `with` block"
    messages = {"outside": "`{optimizer}.{method}(...)` runs outside the `with` block of `{tape}`: the tape does not "
                           "record it and every gradient is None; compute it inside the block"}
    fix_safety = FixSafety.UNSAFE
    triggers = ("scale_loss", "get_scaled_loss")
    explanation = """
        ## What it does
        Finds `optimizer.scale_loss(loss)` (Keras 3) or `optimizer.get_scaled_loss(loss)` (Keras 2)
        computed after the `with tf.GradientTape()` block (or inside the `tape.gradient(...)` call)
        while its result is what the gradient is taken of.

        ## Why is this bad?
        The tape only records operations inside its `with` block. The scaled loss is then not
        connected to the variables: every gradient is `None` and `apply_gradients` fails with
        "No gradients provided for any variable".

        ## Example
        ```python
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        ```

        ## Use instead
        ```python
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        ```

        ## Fix safety
        Unsafe: it moves a statement into the tape block.
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            with tape:
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
        Valid("""
            import tensorflow as tf
            import tf_keras
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            with tape:
                scaled_loss = optimizer.get_scaled_loss(loss)
            grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            # scale before differentiating
            scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf

            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                # scale before differentiating
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
        ),
        Invalid(
            """
            import tensorflow as tf
            import tf_keras

            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = optimizer.get_unscaled_gradients(
                tape.gradient(optimizer.get_scaled_loss(loss), model.trainable_variables))
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf
            import tf_keras

            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = optimizer.get_scaled_loss(loss)
            grads = optimizer.get_unscaled_gradients(
                tape.gradient(scaled_loss, model.trainable_variables))
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=2,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        analysis = training_steps(self.context)
        method = scale_method(self.context.keras)
        for flow in analysis.flows:
            scale = flow.scale
            if scale is None or scale.method != method or flow.user_managed or flow.gradient.tape is None:
                continue
            if flow.scale_statement is not None and in_tape(analysis, flow, flow.scale_statement):
                continue
            self.report(scale.call, "outside", optimizer=flow.optimizer, method=method, tape=flow.gradient.tape,
                        fix=self._fix(analysis, flow), description="Compute the scaled loss inside the tape")

    def _fix(self, analysis: Analysis, flow: Flow) -> dict | None:
        scale = flow.scale
        loss_arg = scale.call.args[0].value if scale.call.args else None
        if flow.scale_statement is None:
            # Inline `tape.gradient(opt.scale_loss(loss), vars)`: name it inside the tape.
            if not isinstance(loss_arg, cst.Name):
                return None
            anchor = loss_anchor(analysis, flow, loss_arg.value)
            if anchor is None:
                return None
            scaled = fresh_name(flow, "scaled_" + loss_arg.value)
            stmt = new_statement(self.context, f"{scaled} = {self.context.code(scale.call)}")
            return {anchor: cst.FlattenSentinel([anchor, stmt]), scale.call: cst.Name(scaled)}
        # `scaled = opt.scale_loss(loss)` just after the block: move it to the end of the block.
        moved = flow.scale_statement
        if not isinstance(moved.node, cst.SimpleStatementLine):
            return None
        tape = analysis.tape_of(flow)
        order = statement_index(flow)
        at = order[id(moved.node)]
        before = [w for w in tape.withs if order.get(id(w), at) < at]
        if not before:
            return None
        with_node = before[-1]
        with_st = statement_of(flow, with_node)
        if with_st is None or with_st.parents != moved.parents or not isinstance(with_node.body, cst.IndentedBlock):
            return None
        if any(assigns_name(st.node, n) for st in flow.scope.statements[order[id(with_node)] + 1: at]
               if st.parents == moved.parents for n in names_in(moved.node)):
            return None  # something it reads changes between the block and the scaling
        last = with_node.body.body[-1]
        return {moved.node: cst.RemoveFromParent(), last: cst.FlattenSentinel([last, moved.node])}
