"""Float16 of certain provenance: values computed from the output of a Keras model or layer this file builds.

Most float16 the inference finds is a default (a parameter of a layer's ``call``, a callee it cannot see:
"a layer, model or helper called on tensors"); code that runs at all may prove such a value float32
(``dtype_env._float32_by_use``). A model or layer that this file constructs, with a head that computes
in the policy's compute dtype, is different: under a mixed float16 policy its output *is* float16, by the
Keras layer table and the bindings, not by a name. A float32 tensor that meets such a value is then a bug
(TensorFlow never promotes: TypeError), not evidence about the value's dtype.

Followed: names bound once, subscripts, dtype-preserving ops and arithmetic with Python numbers or
float16, Keras losses that compute in the predictions' dtype (loss functions in both generations,
``Loss`` objects on tf_keras), and a module function's parameter every call site of this file passes such an
output (``dtype_partials.passed_everywhere``: the function referenced nowhere else). Casts, unknown helpers and
other parameters end the trail.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import children, walk
from mpfix.codemods.analysis.dtype_lattice import F16, PY, argument
from mpfix.codemods.analysis.dtype_regions import Region
from mpfix.codemods.facts import keras_layers
from mpfix.codemods.facts import ops as specs

_DEPTH = 12
_MODELS = ("keras.Model", "keras.models.Model", "keras.Sequential", "keras.models.Sequential")


class OutputProvenance:
    """Mixed into ``DtypeAnalysis``: ``model_output``."""

    def model_output(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> cst.BaseExpression | None:
        """The model or layer (its callee expression) whose float16 output ``node`` is computed from, when
        that is certain: the callee is bound to a construction of this file whose output is the compute dtype."""
        if depth > _DEPTH:
            return None
        deeper = depth + 1
        if isinstance(node, cst.Name):
            if node.value in region.param_dtypes:
                if self._own_predictions(node.value, region) and node.value not in region.assigned:
                    # `y_pred` of the model's own loss hook: Keras fills it with `self(x)` (keras_layers table)
                    return node if self._class_outputs_float16(region.owner, deeper) else None
                # A module function every call of this file hands such an output (directly or through a partial).
                return self.passed_everywhere(node.value, region, lambda value, caller: caller.kind not in (
                    "module", "shadow") and self.model_output(value, caller, deeper))
            values = region.assigned.get(node.value, [])
            if len(values) != 1 or id(values[0]) in region.augmented:
                return None
            return self.model_output(values[0], region, deeper)
        if isinstance(node, cst.Subscript):
            return self.model_output(node.value, region, deeper)
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            return self.model_output(node.expression, region, deeper)
        if isinstance(node, cst.BinaryOperation):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                found = self.model_output(side, region, deeper)
                if found is not None and self.dtype(other, region) in (F16, PY):
                    return found  # float16 with float16 or a Python number stays float16
            return None
        if not isinstance(node, cst.Call):
            return None
        if self._builds_float16_output(node.func, region, deeper):
            return node.func
        predictions = self._loss_predictions(node, region)
        if predictions is not None:
            return self.model_output(predictions, region, deeper)
        spec = specs.lookup(self.resolve(node.func))
        if spec is None or spec.result is not specs.Result.PRESERVES or not node.args:
            return None
        tensors = [a.value for a in node.args if a.keyword is None and not a.star]
        if not tensors:
            return None
        found = self.model_output(tensors[0], region, deeper)
        if found is None or any(self.dtype(t, region) not in (F16, PY) for t in tensors[1:] if not _integer_like(t)):
            return None
        return found

    def loss_function_predictions(self, call: cst.Call, region: Region) -> cst.BaseExpression | None:
        """``y_pred`` of a call of a Keras loss *function* (``keras.losses.mean_squared_error``, directly or through a
        name bound once to it): both generations convert ``y_true`` to ``y_pred``'s dtype and compute in it."""
        resolved = self._bound_callable(call.func, region) or ""
        module, _, name = resolved.rpartition(".")
        if f"{module}." not in keras_layers.LOSS_FUNCTION_MODULES or not name[:1].islower() or \
                name in keras_layers.LOSS_HELPERS:
            return None
        pred = argument(call, "y_pred", 1)
        return pred.value if pred is not None else None

    def _loss_predictions(self, call: cst.Call, region: Region) -> cst.BaseExpression | None:
        """``y_pred`` of a Keras loss that computes in its dtype: a loss function (both generations) or a
        tf_keras ``Loss`` object (Keras 3's converts its inputs to float32 first)."""
        found = self.loss_function_predictions(call, region)
        float32_objects = keras_layers.LOSS_OBJECT_COMPUTES_FLOAT32[self.keras]
        if found is None and not float32_objects and self._loss_object(call, region):
            pred = argument(call, "y_pred", 1)
            found = pred.value if pred is not None else None
        return found

    def _bound_callable(self, func: cst.BaseExpression, region: Region) -> str | None:
        """What ``func`` names: ``keras.losses.mse`` itself, or a name bound once to it or to ``Cls(...)``."""
        resolved = self.resolve(func)
        if resolved:
            return resolved
        if isinstance(func, cst.Name):
            values = region.assigned.get(func.value) or self.module_values.get(func.value, [])
            if len(values) == 1:
                value = values[0]
                return self.resolve(value.func if isinstance(value, cst.Call) else value)
        return None

    def _builds_float16_output(self, func: cst.BaseExpression, region: Region, depth: int) -> bool:
        """``func`` is (bound once to) a model or layer this file constructs whose output is the compute dtype."""
        if depth > _DEPTH:
            return False
        if isinstance(func, cst.Call):
            return self._float16_construction(func, region, depth + 1)
        if isinstance(func, cst.Name) and func.value == "self" and region.owner is not None and \
                not region.layer_method:
            return self._class_outputs_float16(region.owner, depth + 1)  # `self(x)` in a model's own train_step
        values: list[cst.BaseExpression] = []
        if isinstance(func, cst.Name):
            outer: Region | None = region
            while outer is not None and not values:
                values = outer.assigned.get(func.value, []) if func.value not in outer.param_dtypes else []
                outer = outer.enclosing
            values = values or self.module_values.get(func.value, [])
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self" and \
                region.owner is not None:
            values = [v for _, v in self.attribute_values(region.owner, func.attr.value)]
            if len(values) == 1 and isinstance(values[0], cst.Call) and not self.is_layer_class(region.owner) and \
                    self._held_model(values[0]):
                return True  # an exporter's `tf.Module` holding a project model of another file (N22's caller)
        return len(values) == 1 and isinstance(values[0], cst.Call) and \
            self._float16_construction(values[0], region, depth + 1)

    def _held_model(self, built: cst.Call) -> bool:
        """``built`` constructs, without ``dtype=``, a project Keras class of another file whose outputs are the
        compute dtype (``ProjectFileFacts.held_models``: it and its project bases never spell float32)."""
        held = getattr(getattr(self, "_project", None), "held_models", ())
        return bool(held) and self.resolve(built.func) in held and argument(built, "dtype", None) is None

    def _float16_construction(self, built: cst.Call, region: Region, depth: int) -> bool:
        """A construction whose output is float16 under the policy: a Keras layer that autocasts to the compute
        dtype (no ``dtype=``, not float32 by design, not one whose output follows its input), a Sequential or
        functional model whose output layer is one, a layer/model class of this file whose ``call`` returns
        one's output, or a function of this file every ``return`` of which is one of these (``build()``)."""
        if depth > _DEPTH:
            return False
        resolved = self.resolve(built.func) or ""
        if resolved.startswith("keras.") and resolved.endswith(_MODELS):
            return self._float16_head(built, resolved, region, depth + 1)
        if resolved.startswith(("keras.layers.", "keras.src.layers.")):
            return _float16_layer(built, resolved, self.keras)
        if resolved or not isinstance(built.func, cst.Name):
            return False
        name = built.func.value
        cls = self.classes.get(name)
        if cls is not None:
            return argument(built, "dtype", None) is None and self._class_outputs_float16(cls, depth + 1)
        func = self.functions.get(name)
        if func is None:
            return False
        returns = [n.value for n in _own_nodes(func) if isinstance(n, cst.Return)]
        bound = _assignments(func)
        return bool(returns) and all(
            isinstance(v, cst.Call) and self._float16_construction(v, region, depth + 1) or
            isinstance(v, cst.Name) and len(bound.get(v.value, [])) == 1 and isinstance(bound[v.value][0], cst.Call)
            and self._float16_construction(bound[v.value][0], region, depth + 1) for v in returns)

    def _class_outputs_float16(self, cls: cst.ClassDef, depth: int) -> bool:
        """A layer/model class of this file that autocasts and whose ``call`` returns only float16 outputs of
        certain provenance (its own layers': ``return self.head(h)``)."""
        call = self.methods.get(cls, {}).get("call")
        if call is None or depth > _DEPTH or not self.is_layer_class(cls) or not self.autocasts(cls) or \
                self.float32_layer(cls):
            return False
        own = self.region_for(call, cls)
        return bool(own.returns) and all(self.model_output(v, own, depth + 1) is not None for v in own.returns)

    def _float16_head(self, built: cst.Call, resolved: str, region: Region, depth: int) -> bool:
        """The output layer of ``Sequential([..., layer])`` or ``Model(inputs, layer(...)(x))`` computes in float16."""
        scope = self._innermost_function(built) or self.module
        if resolved.endswith("Sequential"):
            layers = argument(built, "layers", 0)
            if layers is None or not isinstance(layers.value, (cst.List, cst.Tuple)) or not layers.value.elements:
                return False
            last = layers.value.elements[-1].value
            return isinstance(last, cst.Call) and self._float16_construction(last, region, depth + 1)
        outputs = argument(built, "outputs", 1)
        value = outputs.value if outputs is not None else None
        if isinstance(value, cst.Name):
            bound = _assignments(scope).get(value.value, [])
            value = bound[0] if len(bound) == 1 else None
        return isinstance(value, cst.Call) and isinstance(value.func, cst.Call) and \
            self._float16_construction(value.func, region, depth + 1)


def _float16_layer(built: cst.Call, resolved: str, keras: int) -> bool:
    """A Keras layer whose output is the compute dtype by the layer table: an output-head layer (Dense, Conv,
    Activation…), a normalization that computes in float32 and casts back, an Embedding; built without ``dtype=``."""
    spec = keras_layers.layer(resolved, keras)
    listed = spec is not None and (spec.output_head or spec.computes_float32)
    return (listed or resolved.rsplit(".", 1)[-1] in keras_layers.READS_IDS) and argument(built, "dtype", None) is None


def _integer_like(node: cst.BaseExpression) -> bool:
    """Axis and shape arguments (``reduce_sum(x, -1)``, ``axis=[1, 2]``) are not tensors the result follows."""
    return isinstance(node, (cst.Integer, cst.List, cst.Tuple)) or (
        isinstance(node, cst.UnaryOperation) and isinstance(node.expression, cst.Integer))


def _own_nodes(scope: cst.CSTNode):
    """The nodes of ``scope`` outside nested functions and classes."""
    stack = list(scope.body.body) if isinstance(scope, cst.FunctionDef) else list(scope.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            stack.extend(children(node, trivia=True))  # node.children, without LibCST rebuilding the list


def _assignments(scope: cst.CSTNode) -> dict[str, list[cst.BaseExpression]]:
    """``name = value`` statements of ``scope`` (a function or the module), nested functions left out."""
    found: dict[str, list[cst.BaseExpression]] = {}
    for node in _own_nodes(scope):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    found.setdefault(target.target.value, []).append(node.value)
                else:
                    for inner in walk(target.target):
                        if isinstance(inner, cst.Name):
                            found.setdefault(inner.value, []).append(node.value)  # unpacked: not one value
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            found.setdefault(node.target.value, []).append(node.value)
    return found
