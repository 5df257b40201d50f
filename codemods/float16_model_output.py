"""MP205: a model's output layer left in float16 under mixed_float16."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import argument
from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtype_targets import loss_promotes_predictions
from mpfix.codemods.analysis.model_outputs import (
    _FEATURE_ACTIVATIONS, _OUTPUT_LAYERS, _SAFE_HEADS, _activation_name, _with_float32, model_facts,
)
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.base import Fact, FixAvailability, Invalid, Need, Rule, Valid
from mpfix.codemods.facts import ops as op_table
from mpfix.codemods.facts.dtype_facts import dtype_facts
from mpfix.findings import FixSafety
from mpfix.project.files import is_test_code


class Float16ModelOutput(Rule):
    code = "MP205"
    name = "float16-model-output"
    uses = frozenset({Fact.MODEL_OUTPUTS, Fact.PROJECT})
    needs = frozenset({Need.OUTPUT_HEAD})  # an output layer built without dtype=, not test code (the parse gate)
    message = "The model's output layer computes in float16 under mixed_float16; build it with dtype=\"float32\""
    messages = {
        "output_layer": "`{layer}` is the model's {head} and computes in float16; build it with `dtype=\"float32\"`",
        "fused_activation": ("`{layer}` is the model's {head} and computes in float16; move the activation to "
                             "`Activation({activation}, dtype=\"float32\")`"),
    }
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (FixSafety.SAFE, FixSafety.UNSAFE)  # safe for softmax heads, unsafe otherwise
    requires_float16 = True
    # `Model(` as a whole word (keras.Model(, models.Model(): "Model(" alone let every
    # `BertModel(`/`build_model(`-style call through; an aliased import (`Model as M`) still counts.
    # `Model):` is a subclassed model's class line (`class Net(keras.Model):`): its head is what `call` returns.
    triggers = ("Sequential", re.compile(r"Model\((?<!\wModel\()"), "Model as ", re.compile(r"__init__\(\s*inputs"),
                "Model):")
    # A report needs an output layer: its class name (`_OUTPUT_LAYERS`, what visit_Module checks `kind` against) is
    # the last part of what `resolve` returns, so the file spells it at the call or in an import (`import Dense as D`).
    also_requires = (tuple(sorted(_OUTPUT_LAYERS)),)
    explanation = """
        ## What it does
        Finds the last layer of a `Sequential` model (list or `model.add` chain) or of a
        functional model (`Model(inputs, outputs)`, also built in a constructor or through
        `super().__init__(inputs=..., outputs=...)`) — a softmax, sigmoid or linear head — built
        without `dtype="float32"` while the `mixed_float16` policy is set, when a loss sees it:
        the model is compiled, fitted or called in a training step or loss in the file, or a
        factory returns it (then only fused softmax/sigmoid heads: callers may cast logits to
        float32 before their loss). Sub-models, blocks and models nobody trains are left alone.

        Test code is left alone: test modules (`test_*.py`, `*_test.py`, `conftest.py`, modules
        in a `tests/` folder) and factories in library modules that only tests call. Their
        `Sequential([Dense(1)])` models check something else (an optimizer, a metric, saving),
        often under a fixture that runs them in float16 on purpose; a float16 head there is no
        training run's loss going wrong, and a reviewer would not want it changed.

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
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
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
            model.compile(optimizer="adam", loss="categorical_crossentropy")
        """),
        # A model nobody trains or returns (exported, summarised, converted): no loss sees its head.
        Valid("""
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
            model.save("model.keras")
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
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
            """,
            """
            import tensorflow as tf
            from tensorflow.keras import layers
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            inputs = tf.keras.Input((8,))
            x = layers.Dense(64, activation="relu")(inputs)
            outputs = layers.Activation("softmax", dtype="float32")(layers.Dense(10)(x))
            model = tf.keras.Model(inputs, outputs)
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
            """,
        ),
        # A factory's model is the model's final output, wherever it is trained.
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
        # A subclassed functional model: its outputs are built in __init__. (A linear head of a model
        # trained elsewhere is left alone: callers may cast the logits before the loss.)
        Invalid(
            """
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")

            class Regressor(keras.Model):
                def __init__(self):
                    inputs = keras.Input((8,))
                    hidden = keras.layers.Dense(32, activation="relu")(inputs)
                    outputs = keras.layers.Dense(1, activation="sigmoid")(hidden)
                    super().__init__(inputs=inputs, outputs=outputs)
            """,
            """
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")

            class Regressor(keras.Model):
                def __init__(self):
                    inputs = keras.Input((8,))
                    hidden = keras.layers.Dense(32, activation="relu")(inputs)
                    outputs = keras.layers.Activation("sigmoid", dtype="float32")(keras.layers.Dense(1)(hidden))
                    super().__init__(inputs=inputs, outputs=outputs)
            """,
        ),
        # A linear (regression) head whose output reaches a loss.
        Invalid(
            """
            import tensorflow as tf
            from tensorflow.keras import layers

            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            inputs = tf.keras.Input((16,))
            hidden = layers.Dense(64, activation="relu")(inputs)
            outputs = layers.Dense(1)(hidden)
            model = tf.keras.Model(inputs, outputs)


            def train_step(x, y):
                pred = model(x, training=True)
                return tf.reduce_mean(tf.keras.losses.mean_squared_error(y, pred))
            """,
            """
            import tensorflow as tf
            from tensorflow.keras import layers

            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            inputs = tf.keras.Input((16,))
            hidden = layers.Dense(64, activation="relu")(inputs)
            outputs = layers.Dense(1, dtype="float32")(hidden)
            model = tf.keras.Model(inputs, outputs)


            def train_step(x, y):
                pred = model(x, training=True)
                return tf.reduce_mean(tf.keras.losses.mean_squared_error(y, pred))
            """,
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        if is_test_code(self.context.path):
            return  # toy models of unit tests: not a training run whose loss a float16 head spoils
        facts = model_facts(self.context)
        for form, layer, where, returned, model, function in facts.heads:
            seen = (model is not None and model in facts.trained) or (function is not None and function in facts.trained_factories)
            # Every training step casts the model's output to float32 first: no loss sees float16 logits
            # (a fused softmax/sigmoid is still computed in float16: reported as for a model trained elsewhere).
            cast_first = model is not None and model in facts.cast_first and not returned
            if cast_first:
                seen, returned = False, True
            if not (returned or seen):
                continue  # no loss in this file sees the head, and no caller gets the model
            if form == "subclass" and self._promoted_by_its_loss(model):
                continue  # its compute_loss promotes the float16 output to float32 targets first (Keras 3)
            if form == "subclass" and self._meets_float16(model):
                continue  # an embedding its train_step multiplies with float16 tensors: no head (float32 would raise)
            if function is not None and function in self.context.project.test_helpers:
                continue  # a test helper's model (built, maybe compiled, there): only tests build it
            resolved = self.context.resolve(layer.func) or ""
            kind = resolved.split(".")[-1]
            if not resolved.startswith("keras.layers.") or kind not in _OUTPUT_LAYERS:
                continue
            if argument(layer, "dtype", None) is not None:
                continue
            self._report(form, layer, where, kind, seen_by_a_loss=seen)

    def _promoted_by_its_loss(self, model: str | None) -> bool:
        cls = next((s for s in self.context.module.body if isinstance(s, cst.ClassDef) and s.name.value == model), None)
        return cls is not None and self.context.keras_known and loss_promotes_predictions(self.context, cls,
                                                                                          self.context.keras)

    def _meets_float16(self, model: str | None) -> bool:
        """The class's ``train_step`` puts ``self(...)`` (or a name bound to it) into a TensorFlow op that refuses mixed
        dtypes beside another float16 operand (``tf.matmul(state, self.item_embedding(ids))``): the output is a feature
        of float16 compute, not what a loss sees, and built in float32 it would make that op raise (TF 2.21: "Input 'b'
        of 'MatMul' Op has type float16 that does not match type float32")."""
        cls = next((s for s in self.context.module.body if isinstance(s, cst.ClassDef) and s.name.value == model), None)
        step = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "train_step"),
                    None) if cls is not None else None
        if step is None:
            return False
        outputs = {t.target.value for n in walk(step.body) if isinstance(n, cst.Assign) and _calls_self(n.value)
                   for t in n.targets if isinstance(t.target, cst.Name)}
        facts = dtype_facts(self.context)
        for call in walk(step.body):
            if not isinstance(call, cst.Call):
                continue
            resolved = self.context.resolve(call.func)
            spec = op_table.known(resolved)
            if spec is None or not spec.same_dtype or not op_table.refuses_mixed(resolved):
                continue
            operands = [a.value for a in call.args if not a.star and
                        (a.keyword is None or a.keyword.value in op_table.TENSOR_KEYWORDS)]
            own = [o for o in operands if _calls_self(o) or (isinstance(o, cst.Name) and o.value in outputs)]
            if own and any(facts.dtype_of(o) is Dtype.FLOAT16 for o in operands if o not in own):
                return True
        return False

    def _report(self, form: str, layer: cst.Call, where, kind: str, seen_by_a_loss: bool) -> None:
        activation_arg = argument(layer, "activation", None)
        if kind == "Activation":
            activation = _activation_name(layer.args[0].value if layer.args else None)
        elif kind == "Softmax":
            activation = "softmax"
        else:
            activation = _activation_name(activation_arg.value if activation_arg else None)
        if activation.lower() in _FEATURE_ACTIVATIONS:
            return
        if activation == "linear" and not seen_by_a_loss:
            # Logits of a model trained elsewhere: callers that cast them to float32 before the loss
            # (tf-models' tasks do) lose nothing. A fused softmax/sigmoid is float16 whatever they do.
            return
        safety = FixSafety.SAFE if activation in _SAFE_HEADS else FixSafety.UNSAFE
        head = f"{activation} head" if activation != "linear" else "linear (regression/logits) head"
        message, fields = "output_layer", {"layer": self.context.code(layer.func), "head": head}
        fused = form != "subclass" and kind != "Activation" and kind != "Softmax" and activation != "linear" \
            and activation_arg is not None \
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
            message, fields["activation"] = "fused_activation", self.context.code(activation_arg.value)
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
            fix = {layer: _with_float32(layer)}
        self.report(layer, message, **fields, fix=fix or None, safety=safety,
                    description="Compute the output layer in float32")


def _calls_self(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "self"
