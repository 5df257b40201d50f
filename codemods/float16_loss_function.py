"""MP207: Keras loss functions called on float16 predictions (they compute in y_pred's dtype)."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import argument, cast
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.analysis.model_outputs import (
    _MODEL_CONSTRUCTORS, _ModelFacts, _is_keras_loss_function, model_facts,
)
from mpfix.codemods.base import Fact, FixAvailability, Invalid, Rule, Valid
from mpfix.codemods.facts.dtype_facts import DtypeFacts, Place, RegionKind, dtype_facts
from mpfix.codemods.names import dotted_name
from mpfix.findings import FixSafety


class Float16LossFunction(Rule):
    code = "MP207"
    name = "float16-loss-function"
    uses = frozenset({Fact.DTYPES, Fact.MODEL_OUTPUTS})
    message = "Loss computed on float16 predictions (loss functions do not cast); cast `y_pred` to float32"
    messages = {
        "loss_function": ("`{loss}` is a loss function and computes in y_pred's dtype, and {evidence}: a float16 loss "
                          "is inf past 65504; cast `y_pred` to float32"),
        "keras2_loss": ("`{loss}` is a Keras 2 loss, which does not cast y_pred, and {evidence}: a float16 loss is inf "
                        "past 65504; cast `y_pred` to float32"),
    }
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.ALWAYS
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
        facts = dtype_facts(self.context)
        models = model_facts(self.context)
        instances = self._loss_instances(facts) if self.context.keras == 2 else set()
        for call in facts.nodes(cst.Call):
            resolved = self.context.resolve(call.func) or ""
            if _is_keras_loss_function(resolved):
                what = "loss_function"
            elif (dotted_name(call.func) or "") in instances:
                what = "keras2_loss"
            else:
                continue
            pred = argument(call, "y_pred", 1)
            if pred is None or facts.dtype_of(pred.value) is not Dtype.FLOAT16:
                continue
            why = self._float16_evidence(facts, models, pred.value, facts.place(call))
            if why is None:
                continue
            converted, imports = cast(self.context, pred.value, "float32")
            self.report(call, what, loss=self.context.code(call.func), evidence=why,
                        fix={pred.value: converted}, imports=imports, description="Cast y_pred to float32")

    def _model_callee(self, facts: DtypeFacts, models: _ModelFacts, node: cst.BaseExpression, place: Place,
                      depth: int = 0) -> str | None:
        """``model`` for ``model(x)`` (directly or through a name bound once to it): a model's raw output."""
        if isinstance(node, cst.Name) and depth < 3:
            unpacked = facts.unpacked_from(node)
            if len(unpacked) == 1 and len(facts.values_of(node)) == 0:
                # `logits, aux = model(x)`: an element of the model's tuple output.
                return self._model_callee(facts, models, unpacked[0][0], place, depth + 1)
            value = facts.value_of(node)
            if value is None:
                return None
            return self._model_callee(facts, models, value, place, depth + 1)
        if not isinstance(node, cst.Call):
            return None
        callee = dotted_name(node.func)
        if callee is None:
            return None
        if callee == "self":
            # self(x) in a Model subclass's train_step.
            return callee if place.in_class and place.kind is RegionKind.TRAIN_STEP else None
        if "model" in callee.split(".")[-1].lower() or any(
                isinstance(v, cst.Call) and (self.context.resolve(v.func) or "") in _MODEL_CONSTRUCTORS
                for v in models.assigned.get(callee, [])):
            return callee
        return None

    def _float16_evidence(self, facts: DtypeFacts, models: _ModelFacts, pred: cst.BaseExpression,
                          place: Place) -> str | None:
        """Why the predictions are float16, or None when the file cannot tell (then: silent).

        Only a model's raw output counts. A model built in this file is judged by its head
        (MP205's finder); a model passed in as a parameter follows the Keras default — the
        last layer computes in the policy's float16 — unless the file builds some layer with
        ``dtype="float32"``; a model made by a factory from another file (tf-models' ResNet,
        whose softmax is float32 there) or any other value is unknown, and unknown is silent.
        """
        callee = self._model_callee(facts, models, pred, place)
        if callee is None:
            return None
        values = models.assigned.get(callee, [])
        if values:
            for value in values:
                if not isinstance(value, cst.Call):
                    return None
                resolved = self.context.resolve(value.func) or ""
                here = resolved in _MODEL_CONSTRUCTORS or (
                    isinstance(value.func, cst.Name) and value.func.value in models.defined)
                if not here:
                    return None
            if models.float16_heads:
                head = models.float16_heads[-1]
                return f"`{callee}` is built here with a float16 output layer `{self.context.code(head.func)}`"
            return None
        params = place.function.params if place.function is not None else None
        names = {p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]} if params else set()
        if callee != "self" and callee not in names:
            return None
        if models.float16_heads:
            head = models.float16_heads[-1]
            return f"this file builds a float16 output layer `{self.context.code(head.func)}`"
        if models.says_float32:
            return None
        return f"`{callee}`'s outputs are float16 under mixed_float16 unless its last layer is float32"

    def _loss_instances(self, facts: DtypeFacts) -> set[str]:
        names = set()
        for call in facts.all_calls:
            resolved = self.context.resolve(call.func) or ""
            if resolved.startswith("keras.losses.") and resolved.split(".")[-1][:1].isupper():
                names.add(call)
        found: set[str] = set()
        for stmt_call in names:
            parent = facts.parent(stmt_call)
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
