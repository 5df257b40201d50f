"""MP110 double-unscale: gradients divided by the loss scale by hand and then unscaled again by the optimizer."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._gradient_fixes import pass_through, single_assign
from mpfix.codemods._loss_scaling_support import STEP_TRIGGERS, K3_SCALE, foreign_api, step_flows
from mpfix.codemods.analysis.gradient_path import MANUAL, MANUAL_UNSCALE, SCALED, UNSCALE, UNSCALED, Flow, OptimizerKind
from mpfix.codemods.base import Fact, Invalid, Need, Rule, Valid
from mpfix.codemods.names import dotted_name
from mpfix.findings import FixSafety


class DoubleUnscale(Rule):
    code = "MP110"
    name = "double-unscale"
    uses = frozenset({Fact.GRADIENT_PATH})
    needs = frozenset({Need.SCALE_CALL, Need.GRADIENT_UPDATE})  # a scaled gradient, an update (the parse gate)
    message = "Gradients are unscaled twice (by hand and by the optimizer); every update is divided by the loss scale"
    messages = {
        "unscaled_twice": ("`{optimizer}` unscales gradients that were already divided by the loss scale: every update "
                           "is divided by it twice"),
        "keras3_by_hand": ("Gradients divided by the loss scale by hand reach `{optimizer}.apply_gradients`, which "
                           "unscales them again (Keras 3's LossScaleOptimizer always does)"),
    }
    fix_safety = FixSafety.UNSAFE
    triggers = ("dynamic_scale", "loss_scale", "get_unscaled_gradients")
    also_requires = ("/",)
    explanation = """
        ## What it does
        Finds gradients divided by the optimizer's current loss scale by hand
        (`g / optimizer.dynamic_scale`, `g / optimizer.loss_scale`, `g / loss_scale`) that are then
        unscaled again: on Keras 2 by `get_unscaled_gradients`, on Keras 3 by the
        LossScaleOptimizer's `apply_gradients`, which always divides by its scale.

        ## Why is this bad?
        Each unscale divides by the scale (32768 at first): done twice, every update is 32768 times
        too small and training stalls without any error. The dynamic scale still moves, so the
        damage changes from step to step.

        ## Example
        ```python
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = [g / optimizer.dynamic_scale for g in grads]
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # Keras 3 LSO: unscales again
        ```

        ## Use instead
        ```python
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Fix safety
        Unsafe (the update changes, to what was meant). Keras 2: the later `get_unscaled_gradients`
        goes (transforms between the two already see unscaled gradients). Keras 3: the manual
        division goes, only where no clip or noise follows it before the update (those would then
        see scaled gradients: see MP109); otherwise it is reported without a fix.
    """
    VALID = [
        # Keras 3: applying through the inner optimizer after a manual unscale is one unscale.
        Valid("""
            import keras
            import tensorflow as tf
            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
            with tf.GradientTape() as tape:
                scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            grads = [g / opt.dynamic_scale for g in grads]
            opt.inner_optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
        Valid("""
            import tensorflow as tf
            import tf_keras
            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))
            with tf.GradientTape() as tape:
                scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            grads = [g / opt.loss_scale for g in grads]
            opt.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=2),
    ]
    INVALID = [
        Invalid(
            """
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = [g / opt.dynamic_scale for g in grads]
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
        ),
        Invalid(
            """
            import tensorflow as tf
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = [g / opt.loss_scale for g in grads]
                grads, _ = tf.clip_by_global_norm(grads, 1.0)
                grads = opt.get_unscaled_gradients(grads)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = [g / opt.loss_scale for g in grads]
                grads, _ = tf.clip_by_global_norm(grads, 1.0)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=2,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        analysis, flows = step_flows(self.context)
        # Gradients an object or a closure keeps and another function applies (accumulation): reported
        # without a fix (the division and the update are in different functions).
        cross = [f for f in analysis.cross_flows if not f.user_managed and not foreign_api(self.context, f)]
        seen: set[int] = set()
        for flow in flows + cross:
            if self.context.keras == 2:
                self._keras2(flow, seen, flow in cross)
            else:
                self._keras3(flow, seen, flow in cross)

    def _keras2(self, flow: Flow, seen: set[int], cross: bool = False) -> None:
        for event in flow.path.events:
            if event.kind != UNSCALE or id(event.node) in seen or not (event.states & {MANUAL, UNSCALED}):
                continue
            if SCALED not in flow.path.states | frozenset().union(*(e.states for e in flow.path.events)):
                continue  # nothing was ever scaled: not this rule's business
            seen.add(id(event.node))
            self.report(event.node, "unscaled_twice", optimizer=event.optimizer or "the optimizer",
                        fix=None if cross else self._drop_unscale(event), description="Drop the second unscale")

    def _drop_unscale(self, event) -> dict | None:
        call = event.node
        if event.helper is not None or not isinstance(call, cst.Call) or len(call.args) != 1:
            return None
        assign = single_assign(event)
        if assign is not None and assign.value is call:
            source, target = dotted_name(call.args[0].value), dotted_name(assign.targets[0].target)
            if source is None or target is None:
                return None
            return {event.statement.node: pass_through(self.context, event.statement.node, target, source)}
        return {call: call.args[0].value}

    def _keras3(self, flow: Flow, seen: set[int], cross: bool = False) -> None:
        # Across functions the optimizer is spelled by each scope: there the update must be by an LSO.
        if flow.scale is None or flow.scale.method != K3_SCALE or flow.kind is OptimizerKind.PLAIN \
                or (flow.kind is not OptimizerKind.LSO if cross else flow.scale.optimizer != flow.optimizer) \
                or MANUAL not in flow.path.states or flow.apply.call.func.attr.value not in ("apply_gradients", "apply"):
            return
        events = flow.path.events
        manual = [i for i, e in enumerate(events) if e.kind == MANUAL_UNSCALE and SCALED in e.states]
        if not manual or id(events[manual[0]].node) in seen:
            return
        index = manual[0]
        event = events[index]
        seen.add(id(event.node))
        fix = None
        if not cross and not any(e.sensitive for e in events[index + 1:]):
            fix = self._drop_division(event)
        self.report(event.node, "keras3_by_hand", optimizer=flow.optimizer,
                    fix=fix, description="Drop the manual unscale")

    def _drop_division(self, event) -> dict | None:
        """``grads = [g / opt.dynamic_scale for g in grads]`` -> nothing (or ``new = grads``)."""
        assign = single_assign(event)
        if assign is None:
            return None
        value = assign.value
        target = dotted_name(assign.targets[0].target)
        if isinstance(value, cst.ListComp) and value.elt is event.node and not value.for_in.ifs \
                and value.for_in.inner_for_in is None and isinstance(value.for_in.target, cst.Name) \
                and isinstance(event.node.left, cst.Name) and event.node.left.value == value.for_in.target.value:
            source = dotted_name(value.for_in.iter)
        elif value is event.node:
            source = dotted_name(event.node.left)
        else:
            return None
        if source is None or target is None:
            return None
        return {event.statement.node: pass_through(self.context, event.statement.node, target, source)}
