"""MP105 loss-term-after-scaling: see the rule's explanation (`mpfix explain MP105`)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.gradient_path import Statement, assigns_name, names_in, training_steps
from mpfix.codemods._loss_scaling_support import scale_method
from mpfix.codemods.base import Fact, Invalid, Rule, Valid
from mpfix.findings import FixSafety


class LossTermAfterScaling(Rule):
    code = "MP105"
    name = "loss-term-after-scaling"
    uses = frozenset({Fact.GRADIENT_PATH})
    message = "A loss term is added after scaling, so it is not scaled; add it to the loss before scaling"
    fix_safety = FixSafety.UNSAFE
    triggers = ("scale_loss", "get_scaled_loss")
    explanation = """
        ## What it does
        Finds loss terms (regularisation, `model.losses`, auxiliary losses) added to the scaled
        loss after `scale_loss` / `get_scaled_loss`.

        ## Why is this bad?
        The term's gradient is then not multiplied by the loss scale but is still divided by it
        when the gradients are unscaled: its contribution shrinks 32768-fold (with a dynamic
        scale it also varies from step to step), and in float16 it underflows.

        ## Example
        ```python
        scaled_loss = optimizer.scale_loss(loss)
        scaled_loss += tf.add_n(model.losses)
        ```

        ## Use instead
        ```python
        scaled_loss = optimizer.scale_loss(loss + tf.add_n(model.losses))
        ```

        ## Fix safety
        Unsafe: the regularisation strength the optimizer sees changes (to what was intended).
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                loss += tf.add_n(model.losses)
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
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
                scaled_loss = optimizer.scale_loss(loss)
                scaled_loss += tf.add_n(model.losses)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf

            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = optimizer.scale_loss(loss + tf.add_n(model.losses))
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
                scaled_loss = optimizer.get_scaled_loss(loss) + 1e-4 * l2(model)
            grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf
            import tf_keras

            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = optimizer.get_scaled_loss(loss + 1e-4 * l2(model))
            grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=2,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        analysis = training_steps(self.context)
        method = scale_method(self.context.keras)
        for scope in analysis.scopes:
            statements = scope.statements
            for i, st in enumerate(statements):
                if not isinstance(st.node, cst.SimpleStatementLine) or len(st.node.body) != 1:
                    continue
                small = st.node.body[0]
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    continue
                value = small.value
                # Inline: `scaled = opt.scale_loss(loss) + term`
                if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add) \
                        and self._is_scale(value.left, method):
                    scale = value.left
                    self.report(value.right, fix={value: self._with_term(scale, value.right)},
                                description="Add the term before scaling")
                    continue
                if not self._is_scale(value, method) or not isinstance(small.targets[0].target, cst.Name):
                    continue
                name = small.targets[0].target.value
                for j, later in enumerate(statements[i + 1:], start=i + 1):
                    term = self._term_added(later, name)
                    if term is not None:
                        fix = None
                        # Folding the term into the scaling evaluates it earlier: only when nothing it
                        # reads changes in between, and the term is not under a branch the scaling is not.
                        reads = names_in(term)
                        if name not in reads and set(later.parents) <= set(st.parents) and not any(
                                assigns_name(mid.node, n) for mid in statements[i + 1:j] for n in reads):
                            fix = {value: self._with_term(value, term), later.node: cst.RemoveFromParent()}
                        self.report(term, fix=fix, description="Add the term before scaling")
                        break
                    if assigns_name(later.node, name):
                        break

    def _is_scale(self, expr: cst.BaseExpression, method: str) -> bool:
        return (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
                and expr.func.attr.value == method and len(expr.args) == 1 and expr.args[0].keyword is None)

    @staticmethod
    def _term_added(st: Statement, name: str) -> cst.BaseExpression | None:
        node = st.node
        if not isinstance(node, cst.SimpleStatementLine) or len(node.body) != 1:
            return None
        small = node.body[0]
        if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) \
                and isinstance(small.target, cst.Name) and small.target.value == name:
            return small.value
        if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                and isinstance(small.targets[0].target, cst.Name) and small.targets[0].target.value == name \
                and isinstance(small.value, cst.BinaryOperation) and isinstance(small.value.operator, cst.Add) \
                and isinstance(small.value.left, cst.Name) and small.value.left.value == name:
            return small.value.right
        return None

    @staticmethod
    def _with_term(scale: cst.Call, term: cst.BaseExpression) -> cst.Call:
        loss = scale.args[0].value
        if isinstance(term, (cst.IfExp, cst.Lambda, cst.Comparison, cst.BooleanOperation, cst.NamedExpr)):
            term = term.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        if isinstance(loss, (cst.IfExp, cst.Lambda, cst.Comparison, cst.BooleanOperation, cst.NamedExpr)):
            loss = loss.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        total = cst.BinaryOperation(left=loss, operator=cst.Add(), right=term)
        return scale.with_changes(args=[scale.args[0].with_changes(value=total)])
