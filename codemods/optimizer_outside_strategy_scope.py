"""MP106 optimizer-outside-strategy-scope: see the rule's explanation (`mpfix explain MP106`)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._factory_scopes import under_a_scope
from mpfix.codemods.analysis.gradient_path import STRATEGY_CONSTRUCTORS, assigned_targets, exclusive, training_steps
from mpfix.codemods.names import dotted_name
from mpfix.codemods.base import Fact, Invalid, Rule, Valid
from mpfix.findings import FixSafety


class OptimizerOutsideStrategyScope(Rule):
    code = "MP106"
    name = "optimizer-outside-strategy-scope"
    uses = frozenset({Fact.GRADIENT_PATH})
    message = ("Optimizer built outside `strategy.scope()` while the model is built inside; "
               "build the optimizer (and its LossScaleOptimizer) inside the scope")
    fix_safety = FixSafety.NONE
    keras_generations = (3,)  # Keras 2 optimizers build their slots under the strategy at the first apply
    triggers = ("scope()",)
    also_requires = ("optimizer",)  # every optimizer build mpfix can see names `optimizers` somewhere
    explanation = """
        ## What it does
        Finds an optimizer or `LossScaleOptimizer` built outside `with strategy.scope():` in a
        function (or module) that builds the model inside that scope, under a `mixed_float16`
        policy or with an explicit LossScaleOptimizer, on Keras 3.

        ## Why is this bad?
        A Keras 3 optimizer keeps the distribution strategy it was built under; its first
        `apply_gradients` inside `strategy.run` creates its variables with that strategy and fails
        (TF 2.21, MirroredStrategy over 2 devices: `RuntimeError: Mixing different
        tf.distribute.Strategy objects`). Keras 2 (`tf_keras`, TF <= 2.15) creates the slots
        under the strategy at the first apply and trains (checked with 2 replicas, custom loop
        and `compile`/`fit`), so Keras 2 files are not reported.

        ## Example
        ```python
        with strategy.scope():
            model = build_model()
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        ```

        ## Use instead
        ```python
        with strategy.scope():
            model = build_model()
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        ```

        ## Fix safety
        No automatic fix: moving the construction can change what it reads.
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            strategy = tf.distribute.MirroredStrategy()
            with strategy.scope():
                model = build_model()
                optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        """),
        # Without a strategy there is no scope to build in (issue 12, defect 6).
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            if use_strategy:
                strategy = tf.distribute.MirroredStrategy()
                with strategy.scope():
                    model = build_model()
                    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            else:
                strategy = None
                model = build_model()
                optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        """),
        # Keras 2 (tf_keras) builds the slots under the strategy at the first apply: it trains.
        Valid("""
            import tensorflow as tf
            import tf_keras
            tf_keras.mixed_precision.set_global_policy("mixed_float16")
            strategy = tf.distribute.MirroredStrategy()
            with strategy.scope():
                model = build_model()
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
        """, keras=2),
        # float32 only, no LSO: not a mixed-precision concern.
        Valid("""
            import tensorflow as tf
            strategy = tf.distribute.MirroredStrategy()
            with strategy.scope():
                model = build_model()
            optimizer = tf.keras.optimizers.Adam()
        """),
    ]
    INVALID = [
        Invalid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            strategy = tf.distribute.MirroredStrategy()
            with strategy.scope():
                model = build_model()
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        """, keras=3),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        analysis = training_steps(self.context)
        self._analysis = analysis
        for scope in analysis.scopes:
            with_statements = [st for st in scope.statements
                               if isinstance(st.node, cst.With) and self._is_scope(st.node, scope)]
            if not with_statements:
                continue
            scopes = [st.node for st in with_statements]
            builds_model = any(
                isinstance(value, cst.Call) and st.node is not None
                for st in scope.statements if any(w in st.parents for w in scopes)
                for _, value in assigned_targets(st.node))
            if not builds_model:
                continue
            for build in analysis.builds:
                # A same-file factory's build is where the factory is called (`optimizer = build_optimizer(hp)`).
                statement = build.statement or build.site
                if build.scope is not scope or statement is None:
                    continue
                if any(w in statement.parents for w in scopes):
                    continue
                if build.is_v1 or all(exclusive(statement, w) for w in with_statements):
                    continue  # built on another branch (`if use_strategy: ... else: ...`): no scope there
                if not (self.context.float16 or build.is_lso):
                    continue
                if build.statement is None and under_a_scope(analysis, build.call):
                    continue  # the factory builds it under its own `with ....scope():` (measure's probe: trains)
                self.report(build.call if build.statement is not None else build.site_call)

    def _is_strategy(self, name: str | None, scope) -> bool:
        """``name`` (read in ``scope``: its own, a closure's or the module's binding) is bound to a
        ``tf.distribute`` strategy (``mwms = tf.distribute.MultiWorkerMirroredStrategy()``)."""
        return name is not None and any(
            isinstance(b.value, cst.Call) and self.context.resolve(b.value.func) in STRATEGY_CONSTRUCTORS
            for b in self._analysis.bindings.bindings_of(scope, name))

    def _is_scope(self, node: cst.With, scope) -> bool:
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and not call.args and isinstance(call.func, cst.Attribute) \
                    and call.func.attr.value == "scope":
                receiver = call.func.value
                if self._is_strategy(dotted_name(receiver), scope) or (
                        isinstance(receiver, cst.Call) and self.context.resolve(receiver.func) in STRATEGY_CONSTRUCTORS):
                    return True
                # A strategy handed in (a parameter, another module's): only its name can tell.
                owner = self.context.code(receiver)
                if "strategy" in owner.lower() or "distribute" in owner:
                    return True
        return False

