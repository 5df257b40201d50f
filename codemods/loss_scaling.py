"""Loss scaling in custom training loops (MP101–MP108), written for the Keras generation that runs.

Under ``mixed_float16`` a custom ``GradientTape`` loop without loss scaling
loses most of its gradients: float16's smallest subnormal is ~6e-8, so
typical per-weight gradients (1e-8..1e-6) round to exactly zero (~95% of them
in a small MLP, measured on CPU). ``compile``/``fit`` scale by themselves;
custom loops must do it by hand, and the two Keras generations spell it
differently (see KERAS_API.md):

* Keras 3: ``scaled_loss = optimizer.scale_loss(loss)`` inside the tape, the
  gradient of ``scaled_loss``; ``apply_gradients`` unscales by itself.
* Keras 2: ``optimizer.get_scaled_loss(loss)`` inside the tape and
  ``optimizer.get_unscaled_gradients(grads)`` before ``apply_gradients``, which
  does NOT unscale (forgetting it multiplies each update by 32768).

Keras 2 calls on Keras 3 (``get_scaled_loss``) belong to MP303, LSO constructor
arguments to MP302: the rules here stay silent on those.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._training_step import (
    LSO,
    UNSCALE_METHOD,
    Analysis,
    Flow,
    OptimizerBuild,
    Statement,
    assigned_targets,
    assigns_name,
    contains,
    in_tape,
    names_in,
    target_names,
    training_steps,
)
from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.codemods.names import dotted_name
from mpfix.findings import FixSafety
from mpfix.policy import Policy

_STEP_TRIGGERS = ("GradientTape", "gradients(")
_K3_SCALE = "scale_loss"
_K2_SCALE = "get_scaled_loss"


# --------------------------------------------------------------------------- shared fix helpers
def _scale_method(keras: int) -> str:
    return _K3_SCALE if keras == 3 else _K2_SCALE


def _foreign_api(context, flow: Flow) -> bool:
    """The step already uses the other generation's scaling API: MP303's business, not ours."""
    foreign = (_K2_SCALE, UNSCALE_METHOD) if context.keras == 3 else (_K3_SCALE,)
    return any(s.method in foreign for s in training_steps(context).scale_calls
               if _same_scope(s.statement, flow))


def _same_scope(statement: Statement, flow: Flow) -> bool:
    return any(st is statement for st in flow.scope.statements)


def _index(flow: Flow) -> dict[int, int]:
    return {id(st.node): i for i, st in enumerate(flow.scope.statements)}


def _statement_of(flow: Flow, node: cst.CSTNode) -> Statement | None:
    return next((st for st in flow.scope.statements if st.node is node), None)


def _anchor(analysis: Analysis, flow: Flow, loss: str) -> cst.BaseStatement | None:
    """The statement after which the scaled loss is computed: the last one that finishes ``loss``.

    With a tape: a top-level statement of the tape's block, so the scaling is recorded and
    runs on every path. With ``tf.gradients`` (graph code): the last assignment before.
    """
    order = _index(flow)
    grad_at = order[id(flow.gradient.statement.node)]
    tape = analysis.tape_of(flow)
    if tape is None:
        best = None
        for st in flow.scope.statements[:grad_at]:
            if isinstance(st.node, cst.SimpleStatementLine) and assigns_name(st.node, loss):
                best = st.node
        return best
    best = None
    for with_node in tape.withs:
        if order.get(id(with_node), grad_at + 1) > grad_at or not isinstance(with_node.body, cst.IndentedBlock):
            continue
        for stmt in with_node.body.body:
            if order.get(id(stmt), grad_at) < grad_at and assigns_name(stmt, loss) \
                    and not contains(stmt, flow.gradient.call):
                best = stmt
    return best


def _fresh_name(flow: Flow, base: str) -> str:
    used: set[str] = set()
    for st in flow.scope.statements:
        for target, _ in assigned_targets(st.node):
            used |= target_names(target)
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{base}_{n}"
    return name


def _statement(context, code: str) -> cst.BaseStatement:
    module = context.module
    return cst.parse_statement(code + module.default_newline, config=module.config_for_parsing)


def scaling_changes(context, analysis: Analysis, flow: Flow) -> dict | None:
    """Edits that scale the flow's loss inside its tape (and unscale its gradients on Keras 2)."""
    grad = flow.gradient
    target = grad.target
    if not isinstance(target, cst.Name):
        return None
    anchor = _anchor(analysis, flow, target.value)
    if anchor is None or contains(anchor, grad.call):
        return None
    base = target.value
    scaled = _fresh_name(flow, base + "_scaled" if base.startswith("scaled") else "scaled_" + base)
    stmt = _statement(context, f"{scaled} = {flow.optimizer}.{_scale_method(context.keras)}({target.value})")
    new_call = grad.call.with_changes(args=[grad.call.args[0].with_changes(value=cst.Name(scaled)), *grad.call.args[1:]])
    if context.keras == 2 and not flow.unscaled:
        new_call = _unscale(flow.optimizer, new_call)
    return {anchor: cst.FlattenSentinel([anchor, stmt]), grad.call: new_call}


def _unscale(optimizer: str, call: cst.Call) -> cst.Call:
    return cst.Call(func=cst.Attribute(value=cst.parse_expression(optimizer), attr=cst.Name(UNSCALE_METHOD)),
                    args=[cst.Arg(call)])


def lso_spelling(context, build_call: cst.Call) -> tuple[str, tuple[str, ...]]:
    """How this file spells LossScaleOptimizer, in the family of Keras it already uses."""
    imports = context.imports
    dotted = dotted_name(build_call.func) or ""
    raw = imports.aliases.get(dotted.split(".")[0], "")
    if imports.imports_module("tf_keras") or raw.startswith("tf_keras"):
        families = ("tf_keras",)
    elif raw == "keras" or raw.startswith("keras."):
        families = ("keras", "tensorflow.keras")
    else:
        families = ("tensorflow.keras", "keras")
    for family in families:
        local = imports.local_name_for(f"{family}.mixed_precision.LossScaleOptimizer")
        if local is not None:
            return local, ()
    if families[0] == "tf_keras":
        return "tf_keras.mixed_precision.LossScaleOptimizer", ("import tf_keras",)
    if families[0] == "keras":
        return "keras.mixed_precision.LossScaleOptimizer", ("import keras",)
    return "tf.keras.mixed_precision.LossScaleOptimizer", ("import tensorflow as tf",)


def _number(value: float) -> str:
    return repr(float(value))


def wrap_changes(context, build: OptimizerBuild) -> tuple[dict, tuple[str, ...]]:
    """Turn loss scaling on where the optimizer is built, in the target generation's form."""
    call = build.call
    fixed = context.loss_scale
    if fixed is not None and context.keras == 3:
        # Keras 3 refuses LSO(dynamic=False); a fixed scale is the optimizer's loss_scale_factor.
        args = list(call.args)
        if args:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) \
                if args[-1].comma is cst.MaybeSentinel.DEFAULT else args[-1]
        args.append(cst.Arg(keyword=cst.Name("loss_scale_factor"), value=cst.Float(_number(fixed)),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        return {call: call.with_changes(args=args)}, ()
    spelled, imports = lso_spelling(context, call)
    args = [cst.Arg(call)]
    if fixed is not None:
        args = [cst.Arg(call, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Arg(keyword=cst.Name("dynamic"), value=cst.Name("False"),
                        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                        comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Arg(keyword=cst.Name("initial_scale"), value=cst.Float(_number(fixed)),
                        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))]
    return {call: cst.Call(func=cst.parse_expression(spelled), args=args)}, imports


def _flows(context) -> tuple[Analysis, list[Flow]]:
    analysis = training_steps(context)
    return analysis, [f for f in analysis.flows if not f.user_managed and not _foreign_api(context, f)]


def _where(flow: Flow) -> str:
    return "the module-level loop" if flow.scope.name == "<module>" else f"`{flow.scope.name}`"


# --------------------------------------------------------------------------- MP101
class OptimizerNotWrapped(Rule):
    code = "MP101"
    name = "optimizer-not-wrapped"
    message = ("Custom training loop under mixed_float16 with a bare optimizer: wrap it in "
               "LossScaleOptimizer and scale the loss, or most float16 gradients underflow to zero")
    fix_safety = FixSafety.UNSAFE
    triggers = _STEP_TRIGGERS
    requires_float16 = True
    explanation = """
        ## What it does
        Finds custom training steps (`tf.GradientTape` or `tf.gradients` whose gradients reach
        `optimizer.apply_gradients`) under a `mixed_float16` policy whose optimizer is built
        without loss scaling and whose loss is never scaled.

        ## Why is this bad?
        float16 cannot hold values below ~6e-8 (smallest subnormal). Typical gradients are
        smaller, so they round to exactly 0: in a small MLP ~95% of the gradient entries are
        exactly zero, no error is raised, and training crawls (loss falls 26% where float32
        falls 87%). `model.fit` scales the loss itself; a custom loop must do it by hand.

        ## Example
        ```python
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        optimizer = tf.keras.optimizers.Adam()

        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Use instead
        Keras 3:
        ```python
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())

        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```
        Keras 2 (`tf_keras`, `TF_USE_LEGACY_KERAS=1`): `scaled_loss = optimizer.get_scaled_loss(loss)`
        inside the tape and `grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, vars))`.

        With `--loss-scale N` the fix writes a fixed scale: Keras 3 `Adam(..., loss_scale_factor=N)`
        (Keras 3 has no fixed-scale LossScaleOptimizer), Keras 2
        `LossScaleOptimizer(opt, dynamic=False, initial_scale=N)` (see MP107).

        When the optimizer is built where mpfix cannot see it (another module, passed through
        more than one call), the finding has no fix and says so.

        ## Fix safety
        Unsafe: it changes the numbers the step computes (on purpose). Review with `mpfix diff`.
    """
    VALID = [
        # fit() scripts: compile wraps the optimizer in an LSO by itself.
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
            model.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")
            model.fit(x, y)
        """),
        # float32-only script: no scaling needed.
        Valid("""
            import tensorflow as tf
            optimizer = tf.keras.optimizers.Adam()
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # bfloat16 has float32's exponent range: no loss scaling, never an LSO.
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
            optimizer = tf.keras.optimizers.Adam()
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # minimize(..., tape=tape) scales and unscales by itself.
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            optimizer.minimize(loss, model.trainable_variables, tape=tape)
        """),
        # The user switches scaling on and off: respected.
        Valid("""
            import tensorflow as tf
            from tensorflow.keras import mixed_precision
            mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.optimizers.Adam()
            if amp:
                optimizer = mixed_precision.LossScaleOptimizer(optimizer)
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                if isinstance(optimizer, mixed_precision.LossScaleOptimizer):
                    loss = optimizer.scale_loss(loss)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
    ]
    INVALID = [
        # Keras 3, @tf.function step, module-level optimizer.
        Invalid(
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)


            @tf.function
            def train_step(x, y):
                with tf.GradientTape() as tape:
                    # forward pass
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            """,
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(learning_rate=1e-3))


            @tf.function
            def train_step(x, y):
                with tf.GradientTape() as tape:
                    # forward pass
                    loss = loss_fn(y, model(x, training=True))
                    scaled_loss = optimizer.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            """,
            keras=3,
        ),
        # Keras 2 (tf_keras), same step.
        Invalid(
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf_keras.optimizers.Adam(learning_rate=1e-3)


            @tf.function
            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            """,
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam(learning_rate=1e-3))


            @tf.function
            def train_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                    scaled_loss = optimizer.get_scaled_loss(loss)
                grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            """,
            keras=2,
        ),
        # Aliased import, optimizer built by a factory in the same module, module-level loop.
        Invalid(
            """
            import tensorflow as tf
            from tensorflow.keras import mixed_precision as mp

            mp.set_global_policy("mixed_float16")


            def make_optimizer(lr):
                return tf.keras.optimizers.SGD(lr)


            opt = make_optimizer(0.1)
            for x, y in dataset:
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf
            from tensorflow.keras import mixed_precision as mp

            mp.set_global_policy("mixed_float16")


            def make_optimizer(lr):
                return mp.LossScaleOptimizer(tf.keras.optimizers.SGD(lr))


            opt = make_optimizer(0.1)
            for x, y in dataset:
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    scaled_loss = opt.scale_loss(loss)
                grads = tape.gradient(scaled_loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=3,
        ),
        # Optimizer passed as an argument: followed to the call site.
        Invalid(
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")


            def train(model, optimizer, data):
                for x, y in data:
                    with tf.GradientTape() as tape:
                        loss = model.compute_loss(x, y, model(x))
                    grads = tape.gradient(loss, model.trainable_variables)
                    optimizer.apply(grads, model.trainable_variables)


            train(build_model(), keras.optimizers.Adam(), data)
            """,
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")


            def train(model, optimizer, data):
                for x, y in data:
                    with tf.GradientTape() as tape:
                        loss = model.compute_loss(x, y, model(x))
                        scaled_loss = optimizer.scale_loss(loss)
                    grads = tape.gradient(scaled_loss, model.trainable_variables)
                    optimizer.apply(grads, model.trainable_variables)


            train(build_model(), keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam()), data)
            """,
            keras=3,
        ),
        # Built in another module: reported without a guess.
        Invalid(
            """
            import tensorflow as tf
            from config import optimizer

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            """,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        if self.context.policy is not Policy.FLOAT16:
            return
        analysis, flows = _flows(self.context)
        groups: dict[int, list[Flow]] = {}
        unknown_seen: set[int] = set()
        for flow in flows:
            if flow.scale is not None or flow.wrapped is True:
                continue
            if flow.wrapped is None:
                if id(flow.apply.call) in unknown_seen:
                    continue
                unknown_seen.add(id(flow.apply.call))
                self.report(
                    flow.apply.call,
                    f"Loss is not scaled under mixed_float16 and mpfix cannot see where `{flow.optimizer}` is "
                    f"built (another module, a container, or passed through several calls): wrap it in LossScaleOptimizer where it is "
                    f"built and scale the loss in {_where(flow)}",
                )
                continue
            groups.setdefault(id(flow.build.call), []).append(flow)
        for group in groups.values():
            first = group[0]
            changes, imports = wrap_changes(self.context, first.build)
            fix: dict | None = dict(changes)
            for flow in group:
                step = scaling_changes(self.context, analysis, flow)
                if step is None or any(k in fix for k in step):
                    fix = None
                    break
                fix.update(step)
            self.report(
                first.apply.call,
                f"`{first.optimizer}` has no loss scaling under mixed_float16: most float16 gradients "
                f"underflow to zero; wrap it in LossScaleOptimizer and scale the loss in {_where(first)}",
                fix=fix,
                description="Wrap the optimizer in LossScaleOptimizer and scale the loss",
                imports=imports,
            )


# --------------------------------------------------------------------------- MP102
class LossNotScaled(Rule):
    code = "MP102"
    name = "loss-not-scaled"
    message = "The optimizer scales losses but the gradient is taken of an unscaled loss; scale it inside the tape"
    fix_safety = FixSafety.UNSAFE
    triggers = _STEP_TRIGGERS
    explanation = """
        ## What it does
        Finds custom training steps whose optimizer has loss scaling on (a `LossScaleOptimizer`,
        a Keras 3 optimizer with `loss_scale_factor`, or `self.optimizer` / `model.optimizer` of a
        model compiled under `mixed_float16`, which Keras wraps itself) but whose gradient is
        taken of the plain loss.

        ## Why is this bad?
        Keras 3's `apply_gradients` divides the gradients by the loss scale (32768 at first):
        without `scale_loss` every update is 32768 times too small, and float16 gradients still
        underflow. On Keras 2 the LSO does nothing unless `get_scaled_loss` /
        `get_unscaled_gradients` are called. A `train_step` override replaces the one that
        called `scale_loss` for you.

        ## Example
        ```python
        class Model(keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(x, y, self(x, training=True))
                grads = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        ```

        ## Use instead
        ```python
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(x, y, self(x, training=True))
                    scaled_loss = self.optimizer.scale_loss(loss)
                grads = tape.gradient(scaled_loss, self.trainable_variables)
        ```
        (Keras 2: `get_scaled_loss` inside the tape and `get_unscaled_gradients` on the gradients.)

        ## Fix safety
        Unsafe: the step's numbers change (on purpose).
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
        # Keras 2 code importing tf_keras that scales and unscales: correct as it is.
        Valid("""
            import tensorflow as tf
            import tf_keras
            tf_keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = optimizer.get_scaled_loss(loss)
            grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # Conditional scaling: the user manages it.
        Valid("""
            import tensorflow as tf
            import tf_keras
            tf_keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled = optimizer.get_scaled_loss(loss) if amp else loss
            grads = tape.gradient(scaled, model.trainable_variables)
            if amp:
                grads = optimizer.get_unscaled_gradients(grads)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        # Re-entering the tape to scale is still recorded.
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            with tape:
                scaled = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """, keras=3),
    ]
    INVALID = [
        # train_step override in a keras.Model subclass: compile() wrapped self.optimizer.
        Invalid(
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")


            class Net(keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        y_pred = self(x, training=True)
                        loss = self.compute_loss(x, y, y_pred)  # float32 loss
                    grads = tape.gradient(loss, self.trainable_variables)
                    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                    return {"loss": loss}
            """,
            """
            import keras
            import tensorflow as tf

            keras.mixed_precision.set_global_policy("mixed_float16")


            class Net(keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        y_pred = self(x, training=True)
                        loss = self.compute_loss(x, y, y_pred)  # float32 loss
                        scaled_loss = self.optimizer.scale_loss(loss)
                    grads = tape.gradient(scaled_loss, self.trainable_variables)
                    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                    return {"loss": loss}
            """,
            keras=3,
        ),
        Invalid(
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_float16")


            class Net(tf_keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        loss = self.compiled_loss(y, self(x, training=True))
                    grads = tape.gradient(loss, self.trainable_variables)
                    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                    return {"loss": loss}
            """,
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_float16")


            class Net(tf_keras.Model):
                def train_step(self, data):
                    x, y = data
                    with tf.GradientTape() as tape:
                        loss = self.compiled_loss(y, self(x, training=True))
                        scaled_loss = self.optimizer.get_scaled_loss(loss)
                    grads = self.optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, self.trainable_variables))
                    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                    return {"loss": loss}
            """,
            keras=2,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        if self.context.policy is Policy.BFLOAT16:
            return  # MP108: the LSO itself is the problem there
        analysis, flows = _flows(self.context)
        # One finding per update: an update fed by several gradients (SAM-style steps) gets one fix.
        by_apply: dict[int, list[Flow]] = {}
        for flow in flows:
            if flow.scale is not None or flow.wrapped is not True:
                continue
            if flow.compiled and not self.context.float16:
                continue  # compile only wraps under mixed_float16
            by_apply.setdefault(id(flow.apply.call), []).append(flow)
        for group in by_apply.values():
            flow = group[0]
            fix: dict | None = {}
            for member in group:
                step = scaling_changes(self.context, analysis, member)
                if step is None or any(k in fix for k in step):
                    fix = None
                    break
                fix.update(step)
            self.report(
                flow.apply.call,
                f"`{flow.optimizer}` scales losses but the gradient in {_where(flow)} is taken of the unscaled "
                f"loss; compute `{flow.optimizer}.{_scale_method(self.context.keras)}(loss)` inside the tape",
                fix=fix,
                description="Scale the loss inside the tape",
            )


# --------------------------------------------------------------------------- MP103
class GradientsNotUnscaled(Rule):
    code = "MP103"
    name = "gradients-not-unscaled"
    message = ("Keras 2: gradients of `get_scaled_loss` reach `apply_gradients` without "
               "`get_unscaled_gradients`; every update is multiplied by the loss scale")
    fix_safety = FixSafety.SAFE
    triggers = ("get_scaled_loss",)
    keras_generations = (2,)
    explanation = """
        ## What it does
        Keras 2 only: finds steps that take the gradient of `optimizer.get_scaled_loss(loss)` and
        pass it to `apply_gradients` without `optimizer.get_unscaled_gradients(...)`.

        ## Why is this bad?
        Keras 2's `LossScaleOptimizer.apply_gradients` does not unscale: every update is the
        loss scale (32768 at first) times too large. With SGD the loss is inf by the second step;
        Keras only logs a warning.

        ## Example
        ```python
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
            scaled_loss = optimizer.get_scaled_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        ```

        ## Use instead
        ```python
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
        ```

        ## Fix safety
        Safe: it completes the pair the code already started; the result is what Keras 2 documents.
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            import tf_keras
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = optimizer.get_scaled_loss(loss)
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            grads = optimizer.get_unscaled_gradients(grads)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
        Valid("""
            import tensorflow as tf
            import tf_keras
            optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled = optimizer.get_scaled_loss(loss) if amp else loss
            grads = tape.gradient(scaled, model.trainable_variables)
            grads = optimizer.get_unscaled_gradients(grads) if amp else grads
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """),
    ]
    INVALID = [
        # Two optimizers on one persistent tape (a GAN): both forget to unscale.
        Invalid(
            """
            import tensorflow as tf
            from tf_keras import mixed_precision

            mixed_precision.set_global_policy("mixed_float16")
            gen_opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            disc_opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


            @tf.function
            def train_step(noise, real):
                with tf.GradientTape(persistent=True) as tape:
                    fake = generator(noise, training=True)
                    gen_loss = g_loss(discriminator(fake, training=True))
                    disc_loss = d_loss(discriminator(real, training=True), discriminator(fake, training=True))
                    scaled_gen = gen_opt.get_scaled_loss(gen_loss)
                    scaled_disc = disc_opt.get_scaled_loss(disc_loss)
                g_grads = tape.gradient(scaled_gen, generator.trainable_variables)
                d_grads = tape.gradient(scaled_disc, discriminator.trainable_variables)
                gen_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
                disc_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
            """,
            """
            import tensorflow as tf
            from tf_keras import mixed_precision

            mixed_precision.set_global_policy("mixed_float16")
            gen_opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            disc_opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


            @tf.function
            def train_step(noise, real):
                with tf.GradientTape(persistent=True) as tape:
                    fake = generator(noise, training=True)
                    gen_loss = g_loss(discriminator(fake, training=True))
                    disc_loss = d_loss(discriminator(real, training=True), discriminator(fake, training=True))
                    scaled_gen = gen_opt.get_scaled_loss(gen_loss)
                    scaled_disc = disc_opt.get_scaled_loss(disc_loss)
                g_grads = gen_opt.get_unscaled_gradients(tape.gradient(scaled_gen, generator.trainable_variables))
                d_grads = disc_opt.get_unscaled_gradients(tape.gradient(scaled_disc, discriminator.trainable_variables))
                gen_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
                disc_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
            """,
            keras=2,
            count=2,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        analysis = training_steps(self.context)
        for flow in analysis.flows:
            if flow.user_managed or flow.unscaled or flow.scale is None or flow.scale.method != _K2_SCALE:
                continue
            call = flow.gradient.call
            self.report(
                flow.apply.call,
                f"Gradients of `{flow.optimizer}.get_scaled_loss(...)` reach `apply_gradients` without "
                f"`{flow.optimizer}.get_unscaled_gradients(...)`: Keras 2 applies them multiplied by the loss scale",
                fix={call: _unscale(flow.optimizer, call)},
                description="Unscale the gradients with get_unscaled_gradients",
            )


# --------------------------------------------------------------------------- MP104
class ScaledLossOutsideTape(Rule):
    code = "MP104"
    name = "scaled-loss-outside-tape"
    message = "The scaled loss is computed where the tape does not record it; compute it inside the `with` block"
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
        method = _scale_method(self.context.keras)
        for flow in analysis.flows:
            scale = flow.scale
            if scale is None or scale.method != method or flow.user_managed or flow.gradient.tape is None:
                continue
            if flow.scale_statement is not None and in_tape(analysis, flow, flow.scale_statement):
                continue
            self.report(scale.call,
                        f"`{flow.optimizer}.{method}(...)` runs outside the `with` block of `{flow.gradient.tape}`: "
                        f"the tape does not record it and every gradient is None; compute it inside the block",
                        fix=self._fix(analysis, flow), description="Compute the scaled loss inside the tape")

    def _fix(self, analysis: Analysis, flow: Flow) -> dict | None:
        scale = flow.scale
        loss_arg = scale.call.args[0].value if scale.call.args else None
        if flow.scale_statement is None:
            # Inline `tape.gradient(opt.scale_loss(loss), vars)`: name it inside the tape.
            if not isinstance(loss_arg, cst.Name):
                return None
            anchor = _anchor(analysis, flow, loss_arg.value)
            if anchor is None:
                return None
            scaled = _fresh_name(flow, "scaled_" + loss_arg.value)
            stmt = _statement(self.context, f"{scaled} = {self.context.code(scale.call)}")
            return {anchor: cst.FlattenSentinel([anchor, stmt]), scale.call: cst.Name(scaled)}
        # `scaled = opt.scale_loss(loss)` just after the block: move it to the end of the block.
        moved = flow.scale_statement
        if not isinstance(moved.node, cst.SimpleStatementLine):
            return None
        tape = analysis.tape_of(flow)
        order = _index(flow)
        at = order[id(moved.node)]
        before = [w for w in tape.withs if order.get(id(w), at) < at]
        if not before:
            return None
        with_node = before[-1]
        with_st = _statement_of(flow, with_node)
        if with_st is None or with_st.parents != moved.parents or not isinstance(with_node.body, cst.IndentedBlock):
            return None
        if any(assigns_name(st.node, n) for st in flow.scope.statements[order[id(with_node)] + 1: at]
               if st.parents == moved.parents for n in names_in(moved.node)):
            return None  # something it reads changes between the block and the scaling
        last = with_node.body.body[-1]
        return {moved.node: cst.RemoveFromParent(), last: cst.FlattenSentinel([last, moved.node])}


# --------------------------------------------------------------------------- MP105
class LossTermAfterScaling(Rule):
    code = "MP105"
    name = "loss-term-after-scaling"
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
        method = _scale_method(self.context.keras)
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


# --------------------------------------------------------------------------- MP106
class OptimizerOutsideStrategyScope(Rule):
    code = "MP106"
    name = "optimizer-outside-strategy-scope"
    message = ("Optimizer built outside `strategy.scope()` while the model is built inside; "
               "build the optimizer (and its LossScaleOptimizer) inside the scope")
    fix_safety = FixSafety.NONE
    triggers = ("scope()",)
    also_requires = ("optimizer",)  # every optimizer build mpfix can see names `optimizers` somewhere
    explanation = """
        ## What it does
        Finds an optimizer or `LossScaleOptimizer` built outside `with strategy.scope():` in a
        function (or module) that builds the model inside that scope, under a `mixed_float16`
        policy or with an explicit LossScaleOptimizer.

        ## Why is this bad?
        The optimizer's slots and the LossScaleOptimizer's loss-scale variables are then created
        outside the distribution strategy: they are not mirrored across replicas (each replica
        can skip steps on its own, or training fails with a cross-replica variable error).

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
        """),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        analysis = training_steps(self.context)
        for scope in analysis.scopes:
            scopes = [st.node for st in scope.statements if isinstance(st.node, cst.With) and self._is_scope(st.node)]
            if not scopes:
                continue
            builds_model = any(
                isinstance(value, cst.Call) and st.node is not None
                for st in scope.statements if any(w in st.parents for w in scopes)
                for _, value in assigned_targets(st.node))
            if not builds_model:
                continue
            for build in analysis.builds:
                if build.scope is not scope or build.statement is None:
                    continue
                if any(w in build.statement.parents for w in scopes):
                    continue
                if not (self.context.float16 or build.is_lso):
                    continue
                self.report(build.call)

    def _is_scope(self, node: cst.With) -> bool:
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and not call.args and isinstance(call.func, cst.Attribute) \
                    and call.func.attr.value == "scope":
                owner = self.context.code(call.func.value)
                if "strategy" in owner.lower() or "distribute" in owner:
                    return True
        return False


# --------------------------------------------------------------------------- MP107
class FixedScaleAppliesNonFinite(Rule):
    code = "MP107"
    name = "fixed-scale-applies-nonfinite"
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
        if self.context.resolve(node.func) not in (LSO, "keras.mixed_precision.experimental.LossScaleOptimizer"):
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "dynamic" \
                    and isinstance(arg.value, cst.Name) and arg.value.value == "False":
                self.report(arg)


# --------------------------------------------------------------------------- MP108
class LossScalingWithBfloat16(Rule):
    code = "MP108"
    name = "loss-scaling-with-bfloat16"
    message = "LossScaleOptimizer under a mixed_bfloat16 policy: bfloat16 needs no loss scaling; remove it"
    fix_safety = FixSafety.UNSAFE
    triggers = ("LossScaleOptimizer",)
    explanation = """
        ## What it does
        Finds a `LossScaleOptimizer` in code whose policy is `mixed_bfloat16` (and no float16).

        ## Why is this bad?
        bfloat16 has float32's exponent range: gradients do not underflow and loss scaling only
        adds work (and, with a dynamic scale, spurious skipped steps). TPUs use bfloat16; some
        code paths refuse the LSO there.

        ## Example
        ```python
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        ```

        ## Use instead
        ```python
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
        optimizer = tf.keras.optimizers.Adam()
        ```
        On Keras 2 the fix also removes `get_scaled_loss` / `get_unscaled_gradients` (a plain
        optimizer does not have them). On Keras 3, `scale_loss` of a plain optimizer returns the
        loss unchanged, so it may stay.

        ## Fix safety
        Unsafe: it removes code.
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            """,
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
            optimizer = tf.keras.optimizers.Adam()
            """,
        ),
        Invalid(
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam())
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = opt.get_scaled_loss(loss)
            grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))
            opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            """
            import tensorflow as tf
            import tf_keras

            tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
            opt = tf_keras.optimizers.Adam()
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
                scaled_loss = loss
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            """,
            keras=2,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        if self.context.policy is not Policy.BFLOAT16:
            return
        analysis = training_steps(self.context)
        for build in analysis.builds:
            if not build.is_lso:
                continue
            call = build.call
            inner = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "inner_optimizer"), None)
            if inner is None:
                self.report(call)
                continue
            fix: dict = {call: inner}
            if self.context.keras == 2:
                for scale in analysis.scale_calls:
                    if scale.optimizer == build.target and scale.method in (_K2_SCALE, UNSCALE_METHOD) \
                            and len(scale.call.args) == 1:
                        fix[scale.call] = scale.call.args[0].value
            self.report(call, fix=fix, description="Remove the LossScaleOptimizer")

