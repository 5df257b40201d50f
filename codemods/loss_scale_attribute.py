"""MP304 loss-scale-attribute: the current loss scale is ``loss_scale`` in Keras 2, ``dynamic_scale`` in Keras 3."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods import _api_table as table
from mpfix.codemods._mp_api_support import ApiDriftRule, is_optimizer_like, optimizer_names
from mpfix.codemods.base import Fact, Invalid, Valid
from mpfix.findings import FixSafety


class LossScaleAttribute(ApiDriftRule):
    code = "MP304"
    name = "loss-scale-attribute"
    uses = frozenset({Fact.VERSION_GUARDS})
    message = "The current loss scale has another name in this Keras generation"
    messages = {
        "loss_scale_call": "`optimizer.loss_scale()` is TF ≤ 2.3; read `optimizer.{new}`",
        "renamed": "`optimizer.{old}` does not exist in Keras {keras}; use `optimizer.{new}`",
    }
    fix_safety = FixSafety.SAFE
    triggers = (".loss_scale", ".dynamic_scale")
    explanation = """
        ## What it does
        Finds `optimizer.loss_scale` where Keras 3 runs and `optimizer.dynamic_scale` where
        Keras 2 runs (including TF ≤ 2.3's `optimizer.loss_scale()` call), on expressions that
        name an optimizer (`opt`, `optimizer`, `self.optimizer`, a name assigned a Keras
        optimizer or `LossScaleOptimizer`).

        ## Why is this bad?
        Keras 3's LossScaleOptimizer keeps its current scale in `dynamic_scale`; Keras 2's in
        `loss_scale`. The other name is an `AttributeError`, typically in a logging line that
        runs only every N steps, long after training started.

        ## Example
        ```python
        tf.summary.scalar("loss_scale", optimizer.loss_scale, step=step)
        ```

        ## Use instead
        ```python
        tf.summary.scalar("loss_scale", optimizer.dynamic_scale, step=step)  # Keras 3
        ```

        ## Fix safety
        Safe: the same value under its name in the target generation. Keras 3 creates
        `dynamic_scale` when the optimizer is built (its first `apply_gradients`). It is a
        variable: read as a number (`float(...)`, `int(...)`), the fix reads
        `dynamic_scale.numpy()`, because `float()` of a variable built under a distribution
        strategy fails.
    """
    VALID = [
        Valid("""
            print(optimizer.dynamic_scale)
        """, keras=3),
        Valid("""
            print(optimizer.loss_scale)
        """, keras=2),
        # Not an optimizer: a config object or an old Policy.
        Valid("""
            print(config.loss_scale, policy.loss_scale, args.dynamic_scale)
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            tf.summary.scalar("loss_scale", opt.loss_scale, step=step)
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            tf.summary.scalar("loss_scale", opt.dynamic_scale, step=step)
            """,
            keras=3,
        ),
        Invalid(
            """
            print(float(self.optimizer.dynamic_scale))
            """,
            """
            print(float(self.optimizer.loss_scale))
            """,
            keras=2,
        ),
        # TF 2.1-2.3: the scale was a LossScale object, called to read it.
        Invalid(
            """
            print("scale", model.optimizer.loss_scale())
            """,
            """
            print("scale", model.optimizer.dynamic_scale)
            """,
            keras=3,
        ),
        Invalid(
            """
            print("scale", model.optimizer.loss_scale())
            """,
            """
            print("scale", model.optimizer.loss_scale)
            """,
            keras=2,
        ),
    ]

    def __init__(self, context) -> None:
        super().__init__(context)
        self._skip: set[cst.CSTNode] = set()
        self._as_number: set[cst.CSTNode] = set()  # the argument of float(...)/int(...)
        self._known_cache: set[str] | None = None

    @property
    def _known(self) -> set[str]:
        if self._known_cache is None:
            self._known_cache = optimizer_names(self.context.module, self.context)
        return self._known_cache

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._skip.add(node.target)  # writing the scale is not a read to rename

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._skip.add(node.target)

    def _target_name(self, attribute: cst.Attribute) -> str | None:
        if attribute.attr.value not in ("loss_scale", "dynamic_scale"):
            return None
        if not is_optimizer_like(attribute.value, self._known):
            return None
        return table.member_target(attribute.attr.value, self.context.keras)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name) and func.value in ("float", "int") and len(node.args) == 1:
            self._as_number.add(node.args[0].value)
        if not (isinstance(func, cst.Attribute) and func.attr.value == "loss_scale" and not node.args):
            return
        if not is_optimizer_like(func.value, self._known):
            return
        self._skip.add(func)
        new = table.member_target("loss_scale", self.context.keras) or "loss_scale"
        replacement = func.with_changes(attr=func.attr.with_changes(value=new))
        self.report(node, "loss_scale_call", new=new,
                    fix={node: replacement}, description=f"Read `{new}`")

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node in self._skip:
            return
        new = self._target_name(node)
        if new is None:
            return
        old = node.attr.value
        replacement: cst.BaseExpression = node.with_changes(attr=node.attr.with_changes(value=new))
        method = table.AS_NUMBER.get((f"LossScaleOptimizer.{new}", self.context.keras))
        if node in self._as_number and method is not None:
            # `float(opt.dynamic_scale)` fails on a MirroredVariable; `float(opt.dynamic_scale.numpy())` does not.
            replacement = cst.Call(cst.Attribute(replacement, cst.Name(method)))
        self.report(node, "renamed", old=old, new=new, keras=self.context.keras,
                    fix={node: replacement}, description=f"Use `{new}`")
