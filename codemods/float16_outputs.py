"""Model outputs and losses left in float16.

The Keras mixed-precision guide makes the last layer float32: a float16
softmax/regression head limits outputs to 65504 with 3 significant digits, and
on Keras 2 (and for Keras 3 loss *functions*) the loss is then computed in
float16 too — regression targets of 1e5 give an inf loss at step 0.
"""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import Kind, argument, float16_scope, tf_spelling
from mpfix.codemods._walk import Visitor, nodes_by_type
from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.codemods.names import dotted_name
from mpfix.findings import FixSafety

_OUTPUT_LAYERS = {"Dense", "EinsumDense", "Activation", "Softmax", "Conv1D", "Conv2D", "Conv3D", "Conv2DTranspose"}
_SAFE_HEADS = {"softmax", "log_softmax"}


def _activation_name(node: cst.BaseExpression | None) -> str:
    if node is None:
        return "linear"
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value or "linear"
    if isinstance(node, cst.Name) and node.value == "None":
        return "linear"
    dotted = dotted_name(node) or ""
    return dotted.split(".")[-1] or "custom"


def _equal() -> cst.AssignEqual:
    return cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))


def _with_float32(call: cst.Call) -> cst.Call:
    return call.with_changes(args=[*call.args, cst.Arg(keyword=cst.Name("dtype"), value=cst.SimpleString('"float32"'),
                                                       equal=_equal())])


def _frame() -> dict:
    # applied: names fed to another layer (`Dense(3)(x)`): a tensor that goes on is a feature, not
    # an output; called: names called on tensors (`block(x)`): a Sequential used as a layer.
    return {"assigned": {}, "sequential": {}, "applied": set(), "called": set(), "pending": []}


class _Models(Visitor):
    """Output layers of Sequential lists, ``model.add`` chains and functional ``Model(inputs, outputs)``.

    Sub-blocks are left out: a ``Sequential`` passed on as an argument or list element
    (``blocks.append(Sequential([...]))``) or called on tensors under a name that does not say
    model, and a functional ``Model(inputs, x)`` whose ``x`` feeds another layer (a feature
    sub-model next to the real one).
    """

    def __init__(self, resolve) -> None:
        super().__init__()
        self.resolve = resolve
        self.frames: list[dict] = [_frame()]
        self.stack: list[cst.CSTNode] = []
        self.heads: list[tuple[str, cst.Call, cst.CSTNode | None]] = []  # (form, constructor, applied/statement)

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        self.stack.pop()

    def visit_ClassDef(self, node) -> bool:
        # A Sequential inside a layer class is a sub-block (ASPP, MLP), not the model's output.
        return False

    def visit_FunctionDef(self, node) -> None:
        self.frames.append(_frame())

    def leave_FunctionDef(self, node) -> None:
        self._close(self.frames.pop())

    def leave_Module(self, node) -> None:
        self._close(self.frames[0])

    def _close(self, frame) -> None:
        for name, last in frame["sequential"].items():
            if last is not None and not _used_as_layer(name, frame):
                self.heads.append(("add", *last))
        for form, layer, where, name in frame["pending"]:
            if form == "list" and name is not None and _used_as_layer(name, frame):
                continue
            if form == "applied" and name is not None and name in frame["applied"]:
                continue
            self.heads.append((form, layer, where))

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        # `output = Dense(3)(output)`: feeding the old value on says nothing about the new one.
        for small in original_node.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    if isinstance(target.target, cst.Name):
                        self.frames[-1]["applied"].discard(target.target.value)

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
        frame = self.frames[-1]
        if isinstance(node.func, cst.Call):
            frame["applied"].update(a.value.value for a in node.args if isinstance(a.value, cst.Name))
        elif isinstance(node.func, cst.Name):
            frame["called"].add(node.func.value)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value in ("append", "extend", "insert"):
            # blocks.append(block): a Sequential collected as a stage of a bigger model.
            frame["called"].update(a.value.value for a in node.args if isinstance(a.value, cst.Name))
        resolved = self.resolve(node.func) or ""
        if resolved in ("keras.Sequential", "keras.models.Sequential"):
            layers = argument(node, "layers", 0)
            parent = self.stack[-2] if len(self.stack) > 1 else None
            if isinstance(parent, (cst.Arg, cst.Element)):
                return  # a block inside another model or list
            name = None
            if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
                name = parent.targets[0].target.value
            if layers is not None and isinstance(layers.value, cst.List) and layers.value.elements:
                last = layers.value.elements[-1].value
                if isinstance(last, cst.Call):
                    frame["pending"].append(("list", last, layers.value, name))
        elif resolved in ("keras.Model", "keras.models.Model"):
            outputs = argument(node, "outputs", 1)
            if outputs is None:
                return
            values = [e.value for e in outputs.value.elements] if isinstance(outputs.value, (cst.List, cst.Tuple)) else [outputs.value]
            for value in values:
                name = None
                if isinstance(value, cst.Name):
                    name = value.value
                    value = frame["assigned"].get(value.value)
                if isinstance(value, cst.Call) and isinstance(value.func, cst.Call):
                    frame["pending"].append(("applied", value.func, value, name))


def _used_as_layer(name: str, frame: dict) -> bool:
    return name in frame["called"] and "model" not in name.lower()


# Hidden-layer activations: a model ending in one is a feature extractor (a backbone or
# sub-model feeding a head elsewhere), not a model output.
_FEATURE_ACTIVATIONS = {"relu", "relu6", "elu", "selu", "gelu", "swish", "silu", "leaky_relu", "tanh", "mish",
                        "hard_swish", "hard_silu"}


class Float16ModelOutput(Rule):
    code = "MP205"
    name = "float16-model-output"
    message = "The model's output layer computes in float16 under mixed_float16; build it with dtype=\"float32\""
    fix_safety = FixSafety.UNSAFE
    requires_float16 = True
    # `Model(` as a whole word (keras.Model(, models.Model(): "Model(" alone let every
    # `BertModel(`/`build_model(`-style call through; an aliased import (`Model as M`) still counts.
    triggers = ("Sequential", re.compile(r"Model\((?<!\wModel\()"), "Model as ")
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
        # A feature sub-model next to the real one: its `x` goes on into the float32 head.
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            inputs = tf.keras.Input((8,))
            x = tf.keras.layers.Dense(16, activation="relu")(inputs)
            logits = tf.keras.layers.Dense(4)(x)
            probs = tf.keras.layers.Activation("softmax", dtype="float32")(logits)
            features = tf.keras.Model(inputs, x)
            model = tf.keras.Model(inputs, probs)
        """),
        # Sequential blocks inside a model (ConvNeXt's downsampling stages).
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            def stages(x):
                blocks = []
                blocks.append(tf.keras.Sequential([tf.keras.layers.LayerNormalization(), tf.keras.layers.Conv2D(8, 2)]))
                stage = tf.keras.Sequential([tf.keras.layers.Conv2D(8, 2)])
                blocks.append(stage)
                block = tf.keras.Sequential([tf.keras.layers.Conv2D(8, 3)])
                return block(blocks[1](blocks[0](x)))
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
        for form, layer, where in model_facts(self.context).heads:
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
        if activation.lower() in _FEATURE_ACTIVATIONS:
            return
        safety = FixSafety.SAFE if activation in _SAFE_HEADS else FixSafety.UNSAFE
        head = f"{activation} head" if activation != "linear" else "linear (regression/logits) head"
        message = f"`{self.context.code(layer.func)}` is the model's {head} and computes in float16; "
        fused = kind != "Activation" and kind != "Softmax" and activation != "linear" and activation_arg is not None \
            and not (isinstance(activation_arg.value, cst.Name) and activation_arg.value.value == "None")
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


# The loss *functions* of keras.losses (Keras 3 and tf_keras): internal helpers reached through
# keras' own modules (keras.losses.loss.squeeze_or_expand_to_same_rank) are not losses.
_LOSS_FUNCTIONS = {
    "KLD", "MAE", "MAPE", "MSE", "MSLE", "binary_crossentropy", "binary_focal_crossentropy", "categorical_crossentropy",
    "categorical_focal_crossentropy", "categorical_generalized_cross_entropy", "categorical_hinge", "circle",
    "cosine_similarity", "ctc", "dice", "hinge", "huber", "kl_divergence", "kld", "kullback_leibler_divergence",
    "log_cosh", "logcosh", "mae", "mape", "mean_absolute_error", "mean_absolute_percentage_error",
    "mean_squared_error", "mean_squared_logarithmic_error", "mse", "msle", "poisson", "sparse_categorical_crossentropy",
    "squared_hinge", "tversky",
}
_MODEL_CONSTRUCTORS = ("keras.Sequential", "keras.models.Sequential", "keras.Model", "keras.models.Model")


def _is_keras_loss_function(resolved: str) -> bool:
    # keras.metrics.* functions (accuracies) are reported, not differentiated: not flagged.
    parts = resolved.split(".")
    return len(parts) == 3 and parts[:2] == ["keras", "losses"] and parts[2] in _LOSS_FUNCTIONS


def _bindings(index: dict[type, list[cst.CSTNode]]) -> tuple[dict[str, list[cst.BaseExpression]], set[str]]:
    """Every ``name = value`` / ``self.name = value`` in the module, and the functions and classes it defines."""
    assigned: dict[str, list[cst.BaseExpression]] = {}
    for node in index.get(cst.Assign, ()):
        for target in node.targets:
            dotted = dotted_name(target.target)
            if dotted:
                assigned.setdefault(dotted, []).append(node.value)
    defined = {node.name.value for kind in (cst.FunctionDef, cst.ClassDef) for node in index.get(kind, ())}
    return assigned, defined


class _ModelFacts:
    """What the file says about its models' outputs, computed once for MP205 and MP207."""

    def __init__(self, context) -> None:
        index = nodes_by_type(context)
        self.heads = []
        # _Models finds heads only at these constructors: without one, skip its walk of the module.
        if any(context.resolve(call.func) in _MODEL_CONSTRUCTORS for call in index.get(cst.Call, ())):
            finder = _Models(context.resolve)
            finder.walk(context.module)
            self.heads = finder.heads
        self.assigned, self.defined = _bindings(index)
        self.float16_heads: list[cst.Call] = []
        for _form, layer, _where in self.heads:
            resolved = context.resolve(layer.func) or ""
            if resolved.startswith("keras.layers.") and resolved.split(".")[-1] in _OUTPUT_LAYERS and \
                    argument(layer, "dtype", None) is None and _head_activation(layer, resolved) not in _FEATURE_ACTIVATIONS:
                self.float16_heads.append(layer)
        # A layer built with dtype="float32" anywhere: the author put the output in float32.
        self.says_float32 = False
        for call in float16_scope(context).all_calls:
            dtype = argument(call, "dtype", None)
            if dtype is not None and "float32" in context.code(dtype.value) and \
                    (context.resolve(call.func) or "").startswith("keras.layers."):
                self.says_float32 = True
                break


def model_facts(context) -> _ModelFacts:
    facts = context.cache.get("float16_models")
    if facts is None or facts.module is not context.module:
        facts = _ModelFacts(context)
        facts.module = context.module
        context.cache["float16_models"] = facts
    return facts


def _head_activation(layer: cst.Call, resolved: str) -> str:
    kind = resolved.split(".")[-1]
    if kind == "Activation":
        return _activation_name(layer.args[0].value if layer.args else None).lower()
    if kind == "Softmax":
        return "softmax"
    activation_arg = argument(layer, "activation", None)
    return _activation_name(activation_arg.value if activation_arg else None).lower()


class Float16LossFunction(Rule):
    code = "MP207"
    name = "float16-loss-function"
    message = "Loss computed on float16 predictions (loss functions do not cast); cast `y_pred` to float32"
    fix_safety = FixSafety.UNSAFE
    requires_float16 = True
    # The losses module in use (`losses.mse(`, `losses.MeanSquaredError`, an import line naming
    # `losses` before or after `import`), not every `model.losses` or `total_losses`. Each regex
    # starts with a literal, which `re` finds fast (a leading `\b` or `^` is tried everywhere).
    triggers = (re.compile(r"losses(?<!\wlosses)\.(?:[a-z_]\w*\s*\(|[A-Z])"),
                re.compile(r"import[ \t][^\n]*\blosses\b"),
                re.compile(r"losses(?<!\wlosses)\b[^\n]*[ \t]import\b"))
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
        # The model built in this file has a float32 head: its predictions are float32.
        Valid("""
            import tensorflow as tf
            from tensorflow import keras
            keras.mixed_precision.set_global_policy("mixed_float16")

            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                                      keras.layers.Dense(1, dtype="float32")])
            loss_fn = keras.losses.MeanSquaredError()

            @tf.function
            def train_step(x, y):
                with tf.GradientTape() as tape:
                    predictions = model(x, training=True)
                    loss = loss_fn(y, predictions)
                return tape.gradient(loss, model.trainable_variables)
        """),
        # A model from another file's factory (tf-models' ResNet ends in a float32 softmax there):
        # unknown, and unknown is silent.
        Valid("""
            import tensorflow as tf
            from project.models import resnet50

            class Runner:
                def __init__(self):
                    self.model = resnet50(num_classes=10)

                def train_step(self, images, labels):
                    logits = self.model(images, training=True)
                    return tf.keras.losses.sparse_categorical_crossentropy(labels, logits)
        """, policy="mixed_float16"),
        # Outputs cast to float32 by every caller before the loss function sees them.
        Valid("""
            import tensorflow as tf

            class Task:
                def build_losses(self, labels, model_outputs):
                    return tf.keras.losses.sparse_categorical_crossentropy(labels, model_outputs)

                def train_step(self, inputs, labels, model):
                    outputs = model(inputs, training=True)
                    outputs = tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), outputs)
                    return self.build_losses(labels=labels, model_outputs=outputs)
        """, policy="mixed_float16"),
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
        # Built here with a float16 regression head, and a Keras 2 loss that does not cast.
        Invalid(
            """
            import tensorflow as tf
            import tf_keras as keras
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
            loss_fn = keras.losses.MeanSquaredError()

            @tf.function
            def train_step(x, y):
                predictions = model(x, training=True)
                return loss_fn(y, predictions)
            """,
            """
            import tensorflow as tf
            import tf_keras as keras
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
            loss_fn = keras.losses.MeanSquaredError()

            @tf.function
            def train_step(x, y):
                predictions = model(x, training=True)
                return loss_fn(y, tf.cast(predictions, tf.float32))
            """,
            keras=2,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        scope = float16_scope(self.context)
        facts = model_facts(self.context)
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
            why = self._float16_evidence(facts, pred.value, region)
            if why is None:
                continue
            tf, imports = tf_spelling(self.context)
            template = cst.parse_expression(f"{tf}.cast(__p__, {tf}.float32)")
            cast = template.with_changes(args=[template.args[0].with_changes(value=pred.value), template.args[1]])
            self.report(call, f"{what}, and {why}: a float16 loss is inf past 65504; cast `y_pred` to float32",
                        fix={pred.value: cast}, imports=imports, description="Cast y_pred to float32")

    def _model_callee(self, facts: _ModelFacts, node: cst.BaseExpression, region, depth: int = 0) -> str | None:
        """``model`` for ``model(x)`` (directly or through a name bound once to it): a model's raw output."""
        if isinstance(node, cst.Name) and depth < 3:
            values = region.assigned.get(node.value, [])
            return self._model_callee(facts, values[0], region, depth + 1) if len(values) == 1 else None
        if not isinstance(node, cst.Call):
            return None
        callee = dotted_name(node.func)
        if callee is None:
            return None
        if callee == "self":
            # self(x) in a Model subclass's train_step.
            return callee if region.in_class and region.kind == "train-step" else None
        if "model" in callee.split(".")[-1].lower() or any(
                isinstance(v, cst.Call) and (self.context.resolve(v.func) or "") in _MODEL_CONSTRUCTORS
                for v in facts.assigned.get(callee, [])):
            return callee
        return None

    def _float16_evidence(self, facts: _ModelFacts, pred: cst.BaseExpression, region) -> str | None:
        """Why the predictions are float16, or None when the file cannot tell (then: silent).

        Only a model's raw output counts. A model built in this file is judged by its head
        (MP205's finder); a model passed in as a parameter follows the Keras default — the
        last layer computes in the policy's float16 — unless the file builds some layer with
        ``dtype="float32"``; a model made by a factory from another file (tf-models' ResNet,
        whose softmax is float32 there) or any other value is unknown, and unknown is silent.
        """
        callee = self._model_callee(facts, pred, region)
        if callee is None:
            return None
        values = facts.assigned.get(callee, [])
        if values:
            for value in values:
                if not isinstance(value, cst.Call):
                    return None
                resolved = self.context.resolve(value.func) or ""
                here = resolved in _MODEL_CONSTRUCTORS or (
                    isinstance(value.func, cst.Name) and value.func.value in facts.defined)
                if not here:
                    return None
            if facts.float16_heads:
                head = facts.float16_heads[-1]
                return f"`{callee}` is built here with a float16 output layer `{self.context.code(head.func)}`"
            return None
        params = region.node.params if isinstance(region.node, cst.FunctionDef) else None
        names = {p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]} if params else set()
        if callee != "self" and callee not in names:
            return None
        if facts.float16_heads:
            head = facts.float16_heads[-1]
            return f"this file builds a float16 output layer `{self.context.code(head.func)}`"
        if facts.says_float32:
            return None
        return f"`{callee}`'s outputs are float16 under mixed_float16 unless its last layer is float32"

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
