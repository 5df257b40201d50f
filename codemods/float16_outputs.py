"""Model outputs and losses left in float16.

The Keras mixed-precision guide makes the last layer float32: a float16
softmax/regression head limits outputs to 65504 with 3 significant digits, and
on Keras 2 (and for Keras 3 loss *functions*) the loss is then computed in
float16 too — regression targets of 1e5 give an inf loss at step 0.
"""

from __future__ import annotations

import libcst as cst

from codemods._float16_scope import Kind, argument, float16_scope, tf_spelling
from codemods.base import Invalid, Rule, Valid
from codemods.names import dotted_name
from mpfix.findings import FixSafety

_OUTPUT_LAYERS = {"Dense", "EinsumDense", "Activation", "Softmax", "Conv1D", "Conv2D", "Conv3D", "Conv2DTranspose"}
_SAFE_HEADS = {"softmax", "log_softmax"}


def _activation_name(node: cst.BaseExpression | None) -> str:
    if node is None:
        return "linear"
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value or "linear"
    dotted = dotted_name(node) or ""
    return dotted.split(".")[-1] or "custom"


def _equal() -> cst.AssignEqual:
    return cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))


def _with_float32(call: cst.Call) -> cst.Call:
    return call.with_changes(args=[*call.args, cst.Arg(keyword=cst.Name("dtype"), value=cst.SimpleString('"float32"'),
                                                       equal=_equal())])


class _Models(cst.CSTVisitor):
    """Output layers of Sequential lists, ``model.add`` chains and functional ``Model(inputs, outputs)``."""

    def __init__(self, resolve) -> None:
        super().__init__()
        self.resolve = resolve
        self.frames: list[dict] = [{"assigned": {}, "sequential": {}}]
        self.heads: list[tuple[str, cst.Call, cst.CSTNode | None]] = []  # (form, constructor, applied/statement)

    def visit_ClassDef(self, node) -> bool:
        # A Sequential inside a layer class is a sub-block (ASPP, MLP), not the model's output.
        return False

    def visit_FunctionDef(self, node) -> None:
        self.frames.append({"assigned": {}, "sequential": {}})

    def leave_FunctionDef(self, node) -> None:
        self._close(self.frames.pop())

    def leave_Module(self, node) -> None:
        self._close(self.frames[0])

    def _close(self, frame) -> None:
        for last in frame["sequential"].values():
            if last is not None:
                self.heads.append(("add", *last))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        frame = self.frames[-1]
        for small in node.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                name = small.targets[0].target.value
                frame["assigned"][name] = small.value
                if isinstance(small.value, cst.Call) and (self.resolve(small.value.func) or "") in (
                        "keras.Sequential", "keras.models.Sequential") and not small.value.args:
                    frame["sequential"][name] = None
            elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                call = small.value
                if isinstance(call.func, cst.Attribute) and call.func.attr.value == "add" and \
                        isinstance(call.func.value, cst.Name) and call.func.value.value in frame["sequential"] and \
                        call.args and isinstance(call.args[0].value, cst.Call):
                    frame["sequential"][call.func.value.value] = (call.args[0].value, node)

    def visit_Call(self, node: cst.Call) -> None:
        resolved = self.resolve(node.func) or ""
        if resolved in ("keras.Sequential", "keras.models.Sequential"):
            layers = argument(node, "layers", 0)
            if layers is not None and isinstance(layers.value, cst.List) and layers.value.elements:
                last = layers.value.elements[-1].value
                if isinstance(last, cst.Call):
                    self.heads.append(("list", last, layers.value))
        elif resolved in ("keras.Model", "keras.models.Model"):
            outputs = argument(node, "outputs", 1)
            if outputs is None:
                return
            values = [e.value for e in outputs.value.elements] if isinstance(outputs.value, (cst.List, cst.Tuple)) else [outputs.value]
            for value in values:
                if isinstance(value, cst.Name):
                    value = self.frames[-1]["assigned"].get(value.value)
                if isinstance(value, cst.Call) and isinstance(value.func, cst.Call):
                    self.heads.append(("applied", value.func, value))


class Float16ModelOutput(Rule):
    code = "MP205"
    name = "float16-model-output"
    message = "The model's output layer computes in float16 under mixed_float16; build it with dtype=\"float32\""
    fix_safety = FixSafety.UNSAFE
    requires_float16 = True
    triggers = ("Sequential", "Model(")
    explanation = """
        ## What it does
        Finds the last layer of a `Sequential` model (list or `model.add` chain) or of a
        functional `Model(inputs, outputs)` — a softmax, sigmoid or linear head — built without
        `dtype="float32"` while the `mixed_float16` policy is set.

        ## Why is this bad?
        The output is float16: at most 65504, with 3 significant digits. A softmax in float16
        loses small probabilities; a regression head cannot represent targets near 1e5, and on
        Keras 2 the loss is then float16 too (inf at step 0; Keras 3 drove the loss scale to
        0.0 and hit inf at step 54 in our reproduction).

        ## Example
        ```python
        outputs = layers.Dense(10, activation="softmax")(x)
        ```

        ## Use instead
        ```python
        outputs = layers.Activation("softmax", dtype="float32")(layers.Dense(10)(x))
        ```
        The Keras guide's form: the matmul stays float16, the activation runs in float32. Heads
        without a fused activation get `dtype="float32"` on the layer itself.

        ## Fix safety
        Safe for softmax heads (the same values, computed more exactly); unsafe otherwise (the
        head's matmul changes dtype, and with it the output's rounding).
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            from tensorflow.keras import layers
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            inputs = tf.keras.Input((8,))
            x = layers.Dense(64, activation="relu")(inputs)
            x = layers.Dense(10)(x)
            outputs = layers.Activation("softmax", dtype="float32")(x)
            model = tf.keras.Model(inputs, outputs)
        """),
        Valid("""
            import tensorflow as tf

            model = tf.keras.Sequential([tf.keras.layers.Dense(64), tf.keras.layers.Dense(1)])
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf
            from tensorflow.keras import layers
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            inputs = tf.keras.Input((8,))
            x = layers.Dense(64, activation="relu")(inputs)
            outputs = layers.Dense(10, activation="softmax")(x)
            model = tf.keras.Model(inputs, outputs)
            """,
            """
            import tensorflow as tf
            from tensorflow.keras import layers
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            inputs = tf.keras.Input((8,))
            x = layers.Dense(64, activation="relu")(inputs)
            outputs = layers.Activation("softmax", dtype="float32")(layers.Dense(10)(x))
            model = tf.keras.Model(inputs, outputs)
            """,
        ),
        Invalid(
            """
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            model = tf.keras.Sequential([
                tf.keras.Input((8,)),
                tf.keras.layers.Dense(64, activation="relu"),
                tf.keras.layers.Dense(1),
            ])
            """,
            """
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            model = tf.keras.Sequential([
                tf.keras.Input((8,)),
                tf.keras.layers.Dense(64, activation="relu"),
                tf.keras.layers.Dense(1, dtype="float32"),
            ])
            """,
        ),
        Invalid(
            """
            from tensorflow import keras
            keras.mixed_precision.set_global_policy("mixed_float16")

            def build():
                model = keras.Sequential()
                model.add(keras.layers.Dense(32, activation="relu"))
                model.add(keras.layers.Dense(10, activation="softmax"))
                return model
            """,
            """
            from tensorflow import keras
            keras.mixed_precision.set_global_policy("mixed_float16")

            def build():
                model = keras.Sequential()
                model.add(keras.layers.Dense(32, activation="relu"))
                model.add(keras.layers.Dense(10))
                model.add(keras.layers.Activation("softmax", dtype="float32"))
                return model
            """,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        finder = _Models(self.context.resolve)
        node.visit(finder)
        for form, layer, where in finder.heads:
            resolved = self.context.resolve(layer.func) or ""
            kind = resolved.split(".")[-1]
            if not resolved.startswith("keras.layers.") or kind not in _OUTPUT_LAYERS:
                continue
            if argument(layer, "dtype", None) is not None:
                continue
            self._report(form, layer, where, kind)

    def _report(self, form: str, layer: cst.Call, where, kind: str) -> None:
        activation_arg = argument(layer, "activation", None)
        if kind == "Activation":
            activation = _activation_name(layer.args[0].value if layer.args else None)
        elif kind == "Softmax":
            activation = "softmax"
        else:
            activation = _activation_name(activation_arg.value if activation_arg else None)
        safety = FixSafety.SAFE if activation in _SAFE_HEADS else FixSafety.UNSAFE
        head = f"{activation} head" if activation != "linear" else "linear (regression/logits) head"
        message = f"`{self.context.code(layer.func)}` is the model's {head} and computes in float16; "
        fused = kind != "Activation" and kind != "Softmax" and activation != "linear" and activation_arg is not None
        fix: dict = {}
        if fused and isinstance(layer.func, cst.Attribute):
            activation_layer = cst.parse_expression(
                f"{self.context.code(layer.func.value)}.Activation(__a__, dtype=\"float32\")")
            activation_layer = activation_layer.with_changes(
                args=[activation_layer.args[0].with_changes(value=activation_arg.value), activation_layer.args[1]])
            args = [a for a in layer.args if a is not activation_arg]
            if args:
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            bare = layer.with_changes(args=args)
            message += f"move the activation to `Activation({self.context.code(activation_arg.value)}, dtype=\"float32\")`"
            if form == "applied":
                fix = {where: cst.Call(func=activation_layer, args=[cst.Arg(where.with_changes(func=bare))])}
            elif form == "list":
                elements = []
                for element in where.elements:
                    if element.value is layer:
                        # Same line, so the list's own layout stays as it is.
                        elements.append(element.with_changes(
                            value=bare, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
                        elements.append(element.with_changes(value=activation_layer))
                    else:
                        elements.append(element)
                fix = {where: where.with_changes(elements=elements)}
            elif form == "add":
                statement = where
                expr = statement.body[0].value
                first = statement.with_changes(body=[statement.body[0].with_changes(
                    value=expr.with_changes(args=[expr.args[0].with_changes(value=bare)]))])
                second = statement.with_changes(leading_lines=[], body=[statement.body[0].with_changes(
                    value=expr.with_changes(args=[expr.args[0].with_changes(value=activation_layer)]))])
                fix = {statement: cst.FlattenSentinel([first, second])}
        else:
            message += "build it with `dtype=\"float32\"`"
            fix = {layer: _with_float32(layer)}
        self.report(layer, message, fix=fix or None, safety=safety,
                    description="Compute the output layer in float32")


def _is_keras_loss_function(resolved: str) -> bool:
    # keras.metrics.* functions (accuracies) are reported, not differentiated: not flagged.
    if not resolved.startswith("keras.losses."):
        return False
    last = resolved.split(".")[-1]
    return last[:1].islower() and last not in ("get", "serialize", "deserialize", "Reduction")


class Float16LossFunction(Rule):
    code = "MP207"
    name = "float16-loss-function"
    message = "Loss computed on float16 predictions (loss functions do not cast); cast `y_pred` to float32"
    fix_safety = FixSafety.UNSAFE
    requires_float16 = True
    triggers = ("losses",)
    explanation = """
        ## What it does
        Finds Keras loss *functions* (`keras.losses.mean_squared_error(y, pred)`,
        `sparse_categorical_crossentropy`, …) called on float16 predictions in a training step,
        loss function or layer; on Keras 2 also loss class instances called directly.

        ## Why is this bad?
        Keras 3 loss classes cast `y_pred` to float32 (and `compile` wraps plain functions in
        one), but a loss function called directly computes in `y_pred`'s dtype, and on Keras 2
        no loss casts at all: the loss is float16, so squared errors above 65504 are inf.

        ## Example
        ```python
        loss = tf.keras.losses.mean_squared_error(y, model(x, training=True))
        ```

        ## Use instead
        ```python
        loss = tf.keras.losses.mean_squared_error(y, tf.cast(model(x, training=True), tf.float32))
        ```

        ## Fix safety
        Unsafe: the loss becomes float32; terms added to it later must be float32 too.
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            @tf.function
            def train_step(model, x, y):
                pred = tf.cast(model(x, training=True), tf.float32)
                return tf.keras.losses.mean_squared_error(y, pred)
        """, policy="mixed_float16"),
        Valid("""
            import tensorflow as tf

            loss_fn = tf.keras.losses.MeanSquaredError()

            @tf.function
            def train_step(model, x, y):
                return loss_fn(y, model(x, training=True))
        """, keras=3, policy="mixed_float16"),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            @tf.function
            def train_step(model, x, y):
                return tf.keras.losses.mean_squared_error(y, model(x, training=True))
            """,
            """
            import tensorflow as tf

            @tf.function
            def train_step(model, x, y):
                return tf.keras.losses.mean_squared_error(y, tf.cast(model(x, training=True), tf.float32))
            """,
            policy="mixed_float16",
        ),
        Invalid(
            """
            import tf_keras
            import tensorflow as tf

            loss_fn = tf_keras.losses.MeanSquaredError()

            @tf.function
            def train_step(model, x, y):
                return loss_fn(y, model(x, training=True))
            """,
            """
            import tf_keras
            import tensorflow as tf

            loss_fn = tf_keras.losses.MeanSquaredError()

            @tf.function
            def train_step(model, x, y):
                return loss_fn(y, tf.cast(model(x, training=True), tf.float32))
            """,
            keras=2,
            policy="mixed_float16",
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        scope = float16_scope(self.context)
        instances = self._loss_instances(scope) if self.context.keras == 2 else set()
        for call, region in list(scope.region_of.items()):
            if not isinstance(call, cst.Call) or region.kind == "module":
                continue
            resolved = self.context.resolve(call.func) or ""
            if _is_keras_loss_function(resolved):
                what = f"`{self.context.code(call.func)}` is a loss function and computes in y_pred's dtype"
            elif (dotted_name(call.func) or "") in instances:
                what = f"`{self.context.code(call.func)}` is a Keras 2 loss, which does not cast y_pred"
            else:
                continue
            pred = argument(call, "y_pred", 1)
            if pred is None or scope.kind(pred.value, region) is not Kind.TENSOR:
                continue
            tf, imports = tf_spelling(self.context)
            template = cst.parse_expression(f"{tf}.cast(__p__, {tf}.float32)")
            cast = template.with_changes(args=[template.args[0].with_changes(value=pred.value), template.args[1]])
            self.report(call, f"{what}: float16 predictions give a float16 loss (inf past 65504); cast `y_pred` to float32",
                        fix={pred.value: cast}, imports=imports, description="Cast y_pred to float32")

    def _loss_instances(self, scope) -> set[str]:
        names = set()
        for call in scope.all_calls:
            resolved = self.context.resolve(call.func) or ""
            if resolved.startswith("keras.losses.") and resolved.split(".")[-1][:1].isupper():
                names.add(call)
        found: set[str] = set()
        for stmt_call in names:
            parent = scope.parent.get(stmt_call)
            if isinstance(parent, cst.Assign):
                for target in parent.targets:
                    dotted = dotted_name(target.target)
                    if dotted:
                        found.add(dotted)
        # Module-level assignments are outside the regions' parent map.
        for stmt in self.context.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Assign) and small.value in names:
                        found.update(dotted_name(t.target) or "" for t in small.targets)
        found.discard("")
        return found
