"""MP303 keras2-scaling-on-keras3: the loss-scaling methods of the other Keras generation.

Keras 2 scales a custom loop with ``get_scaled_loss`` + ``get_unscaled_gradients``; Keras 3 has
``scale_loss`` and unscales inside ``apply_gradients``. Each spelling is an ``AttributeError`` on the
other generation. This rule only translates calls that are there; missing scaling is MP101–MP103's
business. Dropping an unscale is only right where the gradient path from it to the update has no
scale-sensitive transform (``mpfix.codemods.analysis.gradient_path``).
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._gradient_fixes import describe, move_clip_changes
from mpfix.codemods._walk import find_all
from mpfix.codemods.analysis.gradient_path import UNSCALE, UNSCALE_METHOD, assigned_targets, training_steps

from mpfix.codemods import _api_table as table
from mpfix.codemods._mp_api_support import ApiDriftRule
from mpfix.codemods.base import Fact, Invalid, Valid
from mpfix.codemods.names import dotted_name
from mpfix.findings import FixSafety

_ATOMIC = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.List, cst.Tuple, cst.Dict, cst.Set,
           cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.SimpleString, cst.Integer, cst.Float)


def _method_call(node: cst.Call, method: str) -> bool:
    return (isinstance(node.func, cst.Attribute) and node.func.attr.value == method
            and len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star)


def _defines(module: cst.Module, name: str) -> bool:
    """True if the module defines a function ``name`` (a custom optimizer, not Keras')."""
    return any(True for _ in find_all(module, cst.FunctionDef, lambda f: f.name.value == name))


def _unwrapped(value: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(value, _ATOMIC) or value.lpar:
        return value
    return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


class Keras2ScalingOnKeras3(ApiDriftRule):
    code = "MP303"
    name = "keras2-scaling-on-keras3"
    uses = frozenset({Fact.VERSION_GUARDS, Fact.GRADIENT_PATH})
    message = "Loss-scaling method of the other Keras generation; use the target generation's method"
    _UNSCALE = ("`get_unscaled_gradients` does not exist in Keras 3: `apply_gradients` of a LossScaleOptimizer "
                "unscales by itself")
    messages = {
        "scaled_loss": "`get_scaled_loss` does not exist in Keras 3; use `{new}`",
        "unscale": _UNSCALE,
        "unscale_unseen": _UNSCALE + " (mpfix cannot see the update these gradients reach)",
        "unscale_other_optimizer": _UNSCALE + (
            "; the unscaled gradients also reach `{optimizer}`, which does not unscale them: keep the division by "
            "`{owner}`'s scale for it (by hand) before dropping this call"),
        "unscale_clip_stays": _UNSCALE + (
            "; dropping it alone would leave {transform} acting on scaled gradients (Keras 3 unscales inside "
            "`apply_gradients`): clip with the inner optimizer's `global_clipnorm`/`clipnorm`/`clipvalue` instead"),
        "unscale_clip_moves": _UNSCALE + (
            "; {transform} moves into the inner optimizer, which clips after the LossScaleOptimizer unscaled"),
        "keras3_scaling": ("`scale_loss` is Keras 3; Keras 2 scales with `get_scaled_loss` and unscales with "
                           "`get_unscaled_gradients`"),
    }
    notes = {
        "unscale_by_hand": "together with its `get_unscaled_gradients`, which needs a hand edit: see that finding",
        "unscale_fixed_too": "fixed together with its `get_unscaled_gradients`: one fix, see that finding",
        "other_unscale_by_hand": "no fix: another unscale of the same scaled loss needs a hand edit",
        "no_gradient": "mpfix cannot find the `tape.gradient` of this scaled loss",
    }
    fix_safety = FixSafety.SAFE
    triggers = ("get_scaled_loss", "get_unscaled_gradients", "scale_loss(")
    explanation = """
        ## What it does
        Where Keras 3 runs, finds `optimizer.get_scaled_loss(loss)` and
        `optimizer.get_unscaled_gradients(grads)`; where Keras 2 runs (including any file that
        imports `tf_keras`), finds `optimizer.scale_loss(loss)`.

        ## Why is this bad?
        Each is an `AttributeError` on the other generation, raised at the first training step.
        The TF mixed-precision guide still shows the Keras 2 form, so scripts copied from it stop
        working when `tf.keras` becomes Keras 3 (TF 2.16). Keras 3's `apply_gradients` unscales
        the gradients itself, so the unscale call has no Keras 3 counterpart; Keras 2's does not,
        so moving to Keras 2 needs both calls.

        ## Example
        ```python
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            scaled_loss = optimizer.get_scaled_loss(loss)
        scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = optimizer.get_unscaled_gradients(scaled_grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Use instead
        On Keras 3:
        ```python
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            scaled_loss = optimizer.scale_loss(loss)
        scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = scaled_grads
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Fix safety
        Safe towards Keras 3 (every Keras 3 optimizer has `scale_loss`, and a LossScaleOptimizer
        unscales in `apply_gradients`). Towards Keras 2 the fix is safe when the optimizer is
        built as a `LossScaleOptimizer` in the same file, unsafe otherwise (a bare Keras 2
        optimizer has no `get_scaled_loss`); where mpfix cannot find the `tape.gradient` of the
        scaled loss, it reports without a fix.
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = optimizer.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
        # Keras 2 code (the TF Model Garden imports tf_keras): correct there, left alone.
        Valid("""
            import tf_keras

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = optimizer.get_scaled_loss(loss_fn(y, model(x)))
                grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # A custom optimizer defining the method itself.
        Valid("""
            class MyScaler:
                def get_scaled_loss(self, loss):
                    return loss * 8

            scaled = MyScaler().get_scaled_loss(1.0)
        """, keras=3),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = optimizer.get_scaled_loss(loss)
                scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = optimizer.get_unscaled_gradients(scaled_grads)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = optimizer.scale_loss(loss)
                scaled_grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = scaled_grads
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3, count=2,
        ),
        # Unscaling in place: the statement has nothing left to do on Keras 3.
        Invalid(
            """
            def train_step(self, data):
                with tf.GradientTape() as tape:
                    scaled = self.optimizer.get_scaled_loss(self.compute_loss(data))
                grads = tape.gradient(scaled, self.trainable_variables)
                grads = self.optimizer.get_unscaled_gradients(grads)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            """,
            """
            def train_step(self, data):
                with tf.GradientTape() as tape:
                    scaled = self.optimizer.scale_loss(self.compute_loss(data))
                grads = tape.gradient(scaled, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            """,
            keras=3, count=2,
        ),
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = opt.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = opt.get_scaled_loss(loss)
                grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=2,
        ),
        # Scaling written straight into the gradient call.
        Invalid(
            """
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD())

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    grads = tape.gradient(opt.scale_loss(loss), model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD())

            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    grads = opt.get_unscaled_gradients(tape.gradient(opt.get_scaled_loss(loss), model.trainable_variables))
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
        ),
        # Clipping after the unscale: Keras 3 unscales inside apply, so the clip moves into the inner
        # optimizer (dropping the unscale alone would clip gradients 32768x too large).
        Invalid(
            """
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                grads = opt.get_unscaled_gradients(grads)
                grads, _ = tf.clip_by_global_norm(grads, 1.0)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, global_clipnorm=1.0))


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3, count=2,
        ),
        # Half of the unscaled gradients go to a second, plain optimizer: the unscale stays (no fix).
        Invalid(
            """
            import keras
            import tensorflow as tf

            opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
            head_opt = keras.optimizers.SGD(0.01)


            def train_step(x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, variables))
                opt.apply_gradients(zip(grads[:n], variables[:n]))
                head_opt.apply_gradients(zip(grads[n:], variables[n:]))
            """,
            keras=3, count=2,
        ),
        # No gradient of the scaled loss in sight: reported, not guessed.
        Invalid(
            """
            def scaled(loss):
                return optimizer.scale_loss(loss)
            """,
            keras=2,
        ),
        # The unscaled gradients are returned: mpfix cannot see the update, so dropping the unscale is unsafe.
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))


            def gradients(model, x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                return opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))


            def gradients(model, x, y):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.scale_loss(loss_fn(y, model(x)))
                return tape.gradient(scaled_loss, model.trainable_variables)
            """,
            keras=3,
            count=2,
        ),
        # A clip after the unscale would act on scaled gradients: no fix for either call.
        Invalid(
            """
            import tensorflow as tf

            def step(model, opt, x, y, clip_norm):
                with tf.GradientTape() as tape:
                    scaled_loss = opt.get_scaled_loss(loss_fn(y, model(x)))
                grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
                grads, _ = tf.clip_by_global_norm(grads, clip_norm)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
            count=2,
        ),
    ]

    def __init__(self, context) -> None:
        super().__init__(context)
        self._in_place: set[cst.Call] = set()  # ``g = opt.get_unscaled_gradients(g)``: drop the statement
        self._statement_of: dict[cst.Call, cst.SimpleStatementLine] = {}
        self._custom_cache: dict[str, bool] = {}
        self._in_place_found = False

    def _custom(self, method: str) -> bool:
        """The module defines ``method`` itself (a custom optimizer): computed on first need."""
        if method not in self._custom_cache:
            self._custom_cache[method] = _defines(self.context.module, method)
        return self._custom_cache[method]

    # -- Keras 3: Keras 2 calls ---------------------------------------------------------
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        if self.context.keras != table.KERAS3 or len(node.body) != 1:
            return
        assign = node.body[0]
        if (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.value, cst.Call)
                and _method_call(assign.value, "get_unscaled_gradients")):
            target = dotted_name(assign.targets[0].target)
            if target is not None and target == dotted_name(assign.value.args[0].value):
                self._in_place.add(assign.value)
                self._statement_of[assign.value] = node

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.keras == table.KERAS3:
            self._keras2_call_on_keras3(node)

    def _keras2_call_on_keras3(self, node: cst.Call) -> None:
        if _method_call(node, "get_scaled_loss") and not self._custom("get_scaled_loss"):
            new = table.member_target("get_scaled_loss", table.KERAS3)
            fix: dict | None = self._rename(node)
            note = None
            unscales = self._unscales_of(node)
            if any(self._unscale_fix(u, {})[0] is None for u in unscales):
                # Half a migration helps nobody: the rename waits for the unscale, which needs a hand edit.
                fix, note = None, "unscale_by_hand"
            elif unscales:
                fix, note = None, "unscale_fixed_too"
            self.report(node, "scaled_loss", note=note, new=new, fix=fix, description=f"Use `{new}`")
        elif _method_call(node, "get_unscaled_gradients") and not self._custom("get_unscaled_gradients"):
            assert table.member_target("get_unscaled_gradients", table.KERAS3) == table.REMOVE_CALL
            note = None
            fix, safety, variant, fields = self._unscale_fix(node, self._drop(node))
            description = "Drop the unscale call"
            scale = self._scale_of(node)
            if scale is not None and fix is not None:
                # Paired edits are one fix with one safety (issue 20): the rename of the scale and the
                # drop of the unscale only run together, so neither half is ever written alone.
                if any(self._unscale_fix(u, {})[0] is None for u in self._unscales_of(scale)):
                    fix, safety, note = None, FixSafety.NONE, "other_unscale_by_hand"
                else:
                    fix = {**fix, **self._rename(scale)}
                    description = "Use `scale_loss` and drop the unscale call"
            self.report(node, variant, note=note, **fields, fix=fix, safety=safety, description=description)

    @staticmethod
    def _rename(scale: cst.Call) -> dict:
        assert isinstance(scale.func, cst.Attribute)
        new = table.member_target("get_scaled_loss", table.KERAS3)
        return {scale.func.attr: scale.func.attr.with_changes(value=new)}

    def _drop(self, unscale: cst.Call) -> dict:
        """The change that drops ``unscale``: its whole statement when it unscales in place."""
        if not self._in_place_found:
            self._in_place_found = True
            for line in find_all(self.context.module, cst.SimpleStatementLine):
                self.visit_SimpleStatementLine(line)
        if unscale in self._in_place:
            return {self._statement_of[unscale]: cst.RemoveFromParent()}
        return {unscale: _unwrapped(unscale.args[0].value)}

    def _flows(self):
        analysis = training_steps(self.context)
        return analysis.flows + analysis.cross_flows

    def _unscales_of(self, scale: cst.Call) -> list[cst.Call]:
        """The ``get_unscaled_gradients`` calls that pair with this scaled loss: on the path of its
        gradients to an update, or, where no update is in sight (the step returns the gradients),
        by the same optimizer in the same training step."""
        found = {id(e.node): e.node for f in self._flows() if f.scale is not None and f.scale.call is scale
                 for e in f.path.events if e.kind == UNSCALE and isinstance(e.node, cst.Call)
                 and _method_call(e.node, "get_unscaled_gradients")}
        calls = training_steps(self.context).scale_calls
        mine = next((c for c in calls if c.call is scale), None)
        if mine is not None and mine.scope is not None:
            found.update({id(c.call): c.call for c in calls if c.scope is mine.scope and c.method == UNSCALE_METHOD
                          and c.optimizer == mine.optimizer and _method_call(c.call, "get_unscaled_gradients")})
        return list(found.values())

    def _scale_of(self, unscale: cst.Call) -> cst.Call | None:
        """The ``get_scaled_loss`` this unscale pairs with (its fix drops this call)."""
        for call in training_steps(self.context).scale_calls:
            if (call.method == "get_scaled_loss" and _method_call(call.call, "get_scaled_loss")
                    and any(u is unscale for u in self._unscales_of(call.call))):
                return call.call
        return None

    def _unscale_fix(self, node: cst.Call, drop: dict) -> tuple[dict | None, FixSafety, str, dict[str, str]]:
        """Dropping the unscale keeps the loop right only where the LossScaleOptimizer that unscaled is
        what applies the gradients and nothing size-dependent happens to them in between: the fix, its
        safety, and the message (template name and fields) that says so."""
        analysis = training_steps(self.context)
        through = [(flow, i) for flow in analysis.flows + analysis.cross_flows for i, e in enumerate(flow.path.events)
                   if e.kind == UNSCALE and e.node is node]
        if not through:
            return drop, FixSafety.UNSAFE, "unscale_unseen", {}
        owner = dotted_name(node.func.value)
        blockers = []
        for flow, index in through:
            if flow.optimizer != owner:
                return None, FixSafety.NONE, "unscale_other_optimizer", {"optimizer": flow.optimizer, "owner": owner}
            blockers += [e for e in flow.path.events[index + 1:] if e.sensitive and e not in blockers]
        if not blockers:
            return drop, FixSafety.SAFE, "unscale", {}
        flow = through[0][0]
        build = flow.build
        inner = analysis.inner_build(build) if build is not None and build.is_lso else None
        moved = move_clip_changes(self.context, analysis, [f for f, _ in through], blockers, inner)
        what = describe(blockers[0])
        if moved is None:
            return None, FixSafety.NONE, "unscale_clip_stays", {"transform": what}
        changes, new_inner = moved
        return {**drop, **changes, inner: new_inner}, FixSafety.UNSAFE, "unscale_clip_moves", {"transform": what}

    # -- Keras 2: Keras 3 calls ---------------------------------------------------------
    # The scaling calls, the gradients taken of them and the unscales come from the gradient-path model.
    def leave_Module(self, original_node: cst.Module) -> None:
        if self.context.keras != table.KERAS2 or self._custom("scale_loss"):
            return
        analysis = training_steps(self.context)
        for scale in analysis.scale_calls:
            if scale.method != "scale_loss" or not _method_call(scale.call, "scale_loss") or scale.scope is None:
                continue
            scope = scale.scope
            gradients = [g.call for s, g in analysis.gradients if s is scope and g.kind == "tape"]
            scaled_name = next((dotted_name(target) for target, value in assigned_targets(scale.statement.node)
                                if value is scale.call), None)
            unscales = any(s.method == UNSCALE_METHOD for s in analysis.scale_calls if s.scope is scope)
            build = analysis.build_of(scope, scale.optimizer)
            self._report_keras3_scaling(scale.call, gradients, scaled_name, unscales,
                                        build is not None and build.is_lso)

    def _report_keras3_scaling(self, call: cst.Call, gradients: list[cst.Call], scaled_name: str | None,
                               unscales: bool, lso: bool) -> None:
        assert isinstance(call.func, cst.Attribute)
        receiver = call.func.value
        renamed_func = call.func.with_changes(attr=call.func.attr.with_changes(value="get_scaled_loss"))
        safety = FixSafety.SAFE if lso else FixSafety.UNSAFE
        changes: dict[cst.CSTNode, cst.CSTNode] = {}
        for gradient in gradients:
            first = gradient.args[0].value
            direct = first is call
            by_name = scaled_name is not None and dotted_name(first) == scaled_name
            if not (direct or by_name):
                continue
            new_gradient = gradient
            if direct:
                new_gradient = gradient.with_changes(args=[
                    gradient.args[0].with_changes(value=call.with_changes(func=renamed_func)), *gradient.args[1:]])
            changes[gradient] = cst.Call(
                func=cst.Attribute(value=receiver, attr=cst.Name("get_unscaled_gradients")),
                args=[cst.Arg(new_gradient)])
        if unscales:
            changes = {}  # the loop already unscales somewhere: rename only
        elif not changes:
            self.report(call, "keras3_scaling", note="no_gradient")
            return
        if not any(call is g.args[0].value for g in gradients if g in changes):
            changes[call.func] = renamed_func
        self.report(call, "keras3_scaling", fix=changes, safety=safety,
                    description="Use `get_scaled_loss` and `get_unscaled_gradients`")
