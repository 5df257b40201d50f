"""Models a file builds and their output layers: the heads MP205 reports and MP207 follows."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import argument, dtype_analysis
from mpfix.codemods._walk import Visitor, nodes_by_type, walk
from mpfix.codemods.analysis.cast_consumers import consumed_as_float32, is_float32_cast
from mpfix.codemods.analysis.gradient_syntax import taped_calls
from mpfix.codemods.facts import keras_layers
from mpfix.codemods.names import dotted_name


_OUTPUT_LAYERS = keras_layers.OUTPUT_LAYERS
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
    # returned: names the function returns (a factory's model is the model's final output).
    return {"assigned": {}, "sequential": {}, "applied": set(), "called": set(), "pending": [], "returned": set(),
            "function": None}


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
        # (form, output layer, applied call / list / statement, returned from a factory function)
        self.heads: list[tuple[str, cst.Call, cst.CSTNode | None, bool]] = []
        self.class_depth = 0
        self.functions: list[str] = []
        # Names bound to a Keras model or layer anywhere in the file, and those of them whose output is
        # fed straight into another (`head(encoder(x))`, `critic(generator(z))`): sub-models, whose last
        # layer is a feature, not the output.
        self.model_names: set[str] = set()
        self.fed: set[str] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        self.stack.pop()

    def visit_ClassDef(self, node) -> bool:
        # A Sequential inside a layer class is a sub-block (ASPP, MLP), not the model's output;
        # a functional model built in a method (`self.model = keras.Model(...)`,
        # `super().__init__(inputs=..., outputs=...)`) is one.
        self.class_depth += 1
        return True

    def leave_ClassDef(self, node) -> None:
        self.class_depth -= 1

    def visit_FunctionDef(self, node) -> None:
        self.frames.append(_frame())
        self.frames[-1]["function"] = node.name.value
        self.functions.append(node.name.value)

    def leave_FunctionDef(self, node) -> None:
        self.functions.pop()
        self._close(self.frames.pop())

    def _in_model_constructor(self) -> bool:
        """Inside a class, only a constructor builds the class's own model (test methods build toys)."""
        return bool(self.functions) and _CONSTRUCTOR_METHOD.match(self.functions[-1]) is not None

    def leave_Module(self, node) -> None:
        self._close(self.frames[0])

    def _close(self, frame) -> None:
        for name, last in frame["sequential"].items():
            if last is not None and not _used_as_layer(name, frame) and name not in self.fed:
                self.heads.append(("add", *last, name in frame["returned"], name, frame["function"]))
        for form, layer, where, name, model, returned in frame["pending"]:
            if form == "list" and name is not None and _used_as_layer(name, frame):
                continue
            if model is not None and model in self.fed:
                continue
            if form == "applied" and name is not None and name in frame["applied"]:
                continue
            self.heads.append((form, layer, where, returned or (model is not None and model in frame["returned"]), model,
                               frame["function"]))

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
            if isinstance(small, cst.Return) and isinstance(small.value, cst.Name):
                frame["returned"].add(small.value.value)
            elif isinstance(small, cst.Return) and isinstance(small.value, (cst.Tuple, cst.List)):
                # `return model, sub_model`
                frame["returned"].update(e.value.value for e in small.value.elements if isinstance(e.value, cst.Name))
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                name = small.targets[0].target.value
                frame["assigned"][name] = small.value
                if isinstance(small.value, cst.Call):
                    made = self.resolve(small.value.func) or ""
                    if made in _MODEL_CONSTRUCTORS or made.startswith("keras.layers."):
                        self.model_names.add(name)
                if isinstance(small.value, cst.Call) and (self.resolve(small.value.func) or "") in (
                        "keras.Sequential", "keras.models.Sequential") and not small.value.args and not self.class_depth:
                    frame["sequential"][name] = None
            elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                call = small.value
                if isinstance(call.func, cst.Attribute) and call.func.attr.value == "add" and \
                        isinstance(call.func.value, cst.Name) and call.func.value.value in frame["sequential"] and \
                        call.args and isinstance(call.args[0].value, cst.Call):
                    frame["sequential"][call.func.value.value] = (call.args[0].value, node)

    def visit_Call(self, node: cst.Call) -> None:
        frame = self.frames[-1]
        if isinstance(node.func, cst.Name) and node.func.value in self.model_names:
            # `head(encoder(x))`: what `encoder` outputs, `head` takes in.
            self.fed.update(a.value.func.value for a in node.args
                            if isinstance(a.value, cst.Call) and isinstance(a.value.func, cst.Name))
        if isinstance(node.func, cst.Call):
            frame["applied"].update(a.value.value for a in node.args if isinstance(a.value, cst.Name))
        elif isinstance(node.func, cst.Name):
            frame["called"].add(node.func.value)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value in ("append", "extend", "insert"):
            # blocks.append(block): a Sequential collected as a stage of a bigger model.
            frame["called"].update(a.value.value for a in node.args if isinstance(a.value, cst.Name))
        resolved = self.resolve(node.func) or ""
        parent = self.stack[-2] if len(self.stack) > 1 else None
        model = None
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
            model = parent.targets[0].target.value
        returned = any(isinstance(n, cst.Return) for n in self.stack[-4:-1])
        if resolved in ("keras.Sequential", "keras.models.Sequential"):
            if self.class_depth:
                return  # a block of a layer or model class
            layers = argument(node, "layers", 0)
            if isinstance(parent, (cst.Arg, cst.Element)):
                return  # a block inside another model or list
            if layers is not None and isinstance(layers.value, cst.List) and layers.value.elements:
                last = layers.value.elements[-1].value
                if isinstance(last, cst.Call):
                    frame["pending"].append(("list", last, layers.value, model, model, returned))
            return
        if self.class_depth and not self._in_model_constructor():
            return
        if resolved in ("keras.Model", "keras.models.Model"):
            outputs = argument(node, "outputs", 1)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "__init__" and \
                isinstance(node.func.value, cst.Call) and dotted_name(node.func.value.func) == "super" and self.class_depth:
            # class Net(keras.Model): def __init__(...): ... super().__init__(inputs=x, outputs=y)
            outputs = argument(node, "outputs", 1) if argument(node, "inputs", 0) is not None else None
            returned = True  # the class is the model: its outputs are the model's final outputs
        else:
            return
        if outputs is None:
            return
        values = [e.value for e in outputs.value.elements] \
            if isinstance(outputs.value, (cst.List, cst.Tuple, cst.Dict)) else [outputs.value]  # {"price": price}
        for value in values:
            name = None
            if isinstance(value, cst.Name):
                name = value.value
                value = frame["assigned"].get(value.value)
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Call):
                frame["pending"].append(("applied", value.func, value, name, model, returned))


_CONSTRUCTOR_METHOD = re.compile(r"^(__init__|build|_build\w*|build_model|create_model|_make_model)$")


def _is_super_init_with_inputs(call: cst.Call) -> bool:
    """``super().__init__(inputs=..., outputs=...)`` in a keras.Model subclass."""
    func = call.func
    return isinstance(func, cst.Attribute) and func.attr.value == "__init__" and isinstance(func.value, cst.Call) \
        and dotted_name(func.value.func) == "super" and argument(call, "inputs", 0) is not None \
        and argument(call, "outputs", 1) is not None


_TRAIN_METHODS = {"compile", "fit", "train_on_batch", "fit_generator"}


def _cast_to_float32(context, parents: dict, call: cst.Call, assigned: dict) -> bool:
    """``tf.cast(call, tf.float32)``: the call's result goes straight into a cast to float32, or into a
    same-file function or layer that casts that parameter to float32 before any other use."""
    arg = parents.get(call)
    cast = parents.get(arg) if isinstance(arg, cst.Arg) and arg.keyword is None else None
    if isinstance(cast, cst.Call) and cast.args and cast.args[0] is arg and is_float32_cast(context, cast):
        return True
    return consumed_as_float32(context, parents, call, assigned)


def _trained(context, index) -> tuple[set[str], set[str], set[str]]:
    """Names of models the file trains, of the functions whose result it trains, and of the trained
    models whose every call in a training step is cast to float32 at once (no loss sees float16)."""
    trained: set[str] = set()
    uncast: set[str] = set()
    assigned = _bindings(index)[0]
    for call in index.get(cst.Call, ()):
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in _TRAIN_METHODS:
            name = dotted_name(func.value)
            if name:
                trained.add(name)
                uncast.add(name)
    analysis = dtype_analysis(context)
    for region in analysis.regions:
        if region.kind in ("train-step", "tf-function", "loss"):
            for call in region.calls:
                name = dotted_name(call.func)
                if name and "." not in name.replace("self.", ""):
                    trained.add(name)
                    if not _cast_to_float32(context, analysis.parent, call, assigned):
                        uncast.add(name)
    # A tape's block is a training step wherever it is (an eager loop in main() or at module level).
    taped, parents = taped_calls(context.module, context.resolve, index)
    for call in taped:
        name = dotted_name(call.func)
        if name and "." not in name.replace("self.", ""):
            trained.add(name)
            if not _cast_to_float32(context, parents, call, assigned):
                uncast.add(name)
    factories: set[str] = set()
    for assign in index.get(cst.Assign, ()):
        if isinstance(assign.value, cst.Call) and any(dotted_name(t.target) in trained for t in assign.targets):
            name = dotted_name(assign.value.func)
            if name:
                factories.add(name.split(".")[-1])
    # `self.model = build()` … `self.model.fit(...)`: the short names count too.
    trained |= {name.split(".")[-1] for name in trained}
    uncast |= {name.split(".")[-1] for name in uncast}
    return trained, factories, trained - uncast


def _used_as_layer(name: str, frame: dict) -> bool:
    return name in frame["called"] and "model" not in name.lower()


# Hidden-layer activations: a model ending in one is a feature extractor (a backbone or
# sub-model feeding a head elsewhere), not a model output.
_FEATURE_ACTIVATIONS = {"relu", "relu6", "elu", "selu", "gelu", "swish", "silu", "leaky_relu", "tanh", "mish",
                        "hard_swish", "hard_silu"}


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
        if any(context.resolve(call.func) in _MODEL_CONSTRUCTORS or _is_super_init_with_inputs(call)
               for call in index.get(cst.Call, ())):
            finder = _Models(context.resolve)
            finder.walk(context.module)
            self.heads = finder.heads
        self.assigned, self.defined = _bindings(index)
        self.float16_heads: list[cst.Call] = []
        for _form, layer, _where, *_rest in self.heads:
            resolved = context.resolve(layer.func) or ""
            if resolved.startswith("keras.layers.") and resolved.split(".")[-1] in _OUTPUT_LAYERS and \
                    argument(layer, "dtype", None) is None and _head_activation(layer, resolved) not in _FEATURE_ACTIVATIONS:
                self.float16_heads.append(layer)
        # Which models the file trains (compile/fit, or calls in a training step or loss), and the
        # factories that build them: their heads feed a loss here.
        subclassed = _subclass_heads(context, index)
        self.trained, self.trained_factories, self.cast_first = _trained(context, index) \
            if self.heads or subclassed else (set(), set(), set())
        for cls, layer in subclassed:
            # The class's own train_step calls `self(...)`, or an instance of it is trained here.
            if _trains_itself(cls) or any(name in self.trained for name, values in self.assigned.items()
                                          if any(_constructs(v, cls) for v in values)):
                self.trained.add(cls.name.value)
            self.heads.append(("subclass", layer, layer, False, cls.name.value, None))
        # A layer built with dtype="float32" anywhere: the author put the output in float32.
        self.says_float32 = False
        for call in dtype_analysis(context).all_calls:
            dtype = argument(call, "dtype", None)
            if dtype is not None and "float32" in context.code(dtype.value) and \
                    (context.resolve(call.func) or "").startswith("keras.layers."):
                self.says_float32 = True
                break


_MODEL_BASES = ("keras.Model", "keras.models.Model")


def _subclass_heads(context, index) -> list[tuple[cst.ClassDef, cst.Call]]:
    """``class Net(keras.Model)`` whose ``call`` returns ``self.head(...)`` on every path, with ``self.head``
    built once in ``__init__`` as a Keras layer: that layer is the model's output layer."""
    heads = []
    for cls in index.get(cst.ClassDef, ()):
        if not any(context.resolve(base.value) in _MODEL_BASES for base in cls.bases):
            continue
        methods = {f.name.value: f for f in cls.body.body if isinstance(f, cst.FunctionDef)}
        call, init = methods.get("call"), methods.get("__init__")
        if call is None or init is None:
            continue
        returned = {_self_layer(n.value) for n in walk(call.body) if isinstance(n, cst.Return)}
        if len(returned) != 1 or None in returned:
            continue  # a dict, a tuple, a plain tensor, or different layers on different paths
        attr = returned.pop()
        built = [small.value for n in walk(init.body) if isinstance(n, cst.SimpleStatementLine)
                 for small in n.body if isinstance(small, cst.Assign)
                 for target in small.targets if _self_layer_target(target.target) == attr]
        if len(built) == 1 and isinstance(built[0], cst.Call) and \
                (context.resolve(built[0].func) or "").startswith("keras.layers."):
            heads.append((cls, built[0]))
    return heads


def _self_layer(value: cst.BaseExpression | None) -> str | None:
    """``self.head(h)`` -> ``"head"``."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        return _self_layer_target(value.func)
    return None


def _self_layer_target(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def _trains_itself(cls: cst.ClassDef) -> bool:
    """A ``train_step`` override that calls ``self(...)``: its loss sees the model's output."""
    step = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "train_step"), None)
    return step is not None and any(isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "self"
                                    for n in walk(step.body))


def _constructs(value: cst.BaseExpression, cls: cst.ClassDef) -> bool:
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == cls.name.value


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
