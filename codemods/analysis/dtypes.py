"""One dtype inference for the float16 rules (MP201–MP207): what dtype an expression holds.

The lattice: ``FLOAT16`` (follows the policy's compute dtype: float16 under
``mixed_float16``), ``BFLOAT16``, ``FLOAT32``, ``FLOAT64``, ``COMPLEX``, ``INT``, ``BOOL``,
``PYTHON`` (a Python number or string, converted to whatever it meets) and ``UNKNOWN``.
Unknown never flags on its own.

Where float16 comes from: a layer's ``call`` under the mixed policy (Keras 3 autocasts every
floating tensor argument, tf_keras only the first; a layer built with ``autocast=False`` or a
preprocessing layer none), the layers and models it calls, what a model returns into a training
step or loss. Where float32 comes from: explicit dtypes and casts, the float32-creating ops of
``analysis.float32_ops`` (``tf.*`` and ``keras.ops.*`` alike), ``input_signature`` specs,
``self.dtype``/``variable_dtype``, layers built with ``dtype="float32"``, gradients, and —
outside a layer's ``call``, where TensorFlow never promotes — values that meet float32 in
arithmetic (code that runs proves them float32).

The analysis is per file and flow-insensitive within a function (a name's dtype joins all its
assignments; at call sites the last assignment before the call counts). It runs over *regions*
(function bodies float16 can reach), found once per file; everything else is computed on demand
and memoized: attribute dtypes and constructor defaults, return dtypes of same-file functions,
tuple unpacking of model outputs.

No scope metadata is used (10x the parse cost): regions are found by walking function
definitions, names by a per-region assignment table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

import libcst as cst

from mpfix.codemods._walk import Visitor, children, nodes_by_type
from mpfix.codemods.analysis import float32_ops as ops_table
from mpfix.codemods.facts import ops as specs
from mpfix.codemods.names import dotted_name


class Dtype(Enum):
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    COMPLEX = "complex"
    INT = "int"
    BOOL = "bool"
    PYTHON = "python"
    UNKNOWN = "unknown"

    @property
    def wide(self) -> bool:
        """float32 or float64: holds 1e9 and 1e-12, but mixing it with float16 is an error."""
        return self in (Dtype.FLOAT32, Dtype.FLOAT64)

    @property
    def floating_tensor(self) -> bool:
        return self in (Dtype.FLOAT16, Dtype.BFLOAT16, Dtype.FLOAT32, Dtype.FLOAT64)


F16, BF16, F32, F64 = Dtype.FLOAT16, Dtype.BFLOAT16, Dtype.FLOAT32, Dtype.FLOAT64
CPLX, INT, BOOL, PY, UNK = Dtype.COMPLEX, Dtype.INT, Dtype.BOOL, Dtype.PYTHON, Dtype.UNKNOWN

_NAMED = {
    "float16": F16, "half": F16, "bfloat16": BF16, "float32": F32, "float": F32, "single": F32,
    "float64": F64, "double": F64, "complex64": CPLX, "complex128": CPLX, "complex": CPLX,
    "bool": BOOL, "bool_": BOOL,
}
_INT_NAME = re.compile(r"^u?int(8|16|32|64)?$|^long$")
_FLOAT32_STATE_CLASS = re.compile(r"Optimizer|Regularizer|Metric|Constraint|Initializer|Schedule")
# Metric functions (keras.metrics.pearson_correlation): Keras' metric wrappers cast y_pred to float32.
_METRIC_FUNCTION = re.compile(r"accuracy|correlation|metric|precision|recall|_auc$|iou_score")
_PYTHON_FUNCS = {"len", "int", "float", "round", "abs", "sum", "min", "max", "range", "pow", "divmod", "bool", "str"}
LOSS_NAME = re.compile(r"loss|penalt|regulari", re.IGNORECASE)
_STEP_NAME = re.compile(r"(^|_)(train|test|eval|val|predict|valid|validation)?_?step(_fn)?$|^step_fn$")
_GUARD = re.compile(r"float16|half|fp16|bfloat16|\.dtype|compute_dtype|mixed")
# Layers that do not autocast their inputs (Keras' preprocessing and audio/feature layers).
_NO_AUTOCAST_BASE = re.compile(r"Preprocessing|Preprocessor|FeatureExtractor|Tokenizer|Spectrogram|"
                               r"Rescaling|Normalization\b|Resizing|Discretization|Hashing|Lookup|Encoding")
_SIZE_NAME = re.compile(r"^(n|d|dim|depth|size|length|len|width|height|channels|units|hidden|d_model|i|j|k|"
                        r"step|pos|position|index|idx|max_\w+|num_\w+|n_\w+|\w+_(dim|size|len|length|depth|units))$")
# Methods the Keras base class's own `call` runs on the inputs (Merge, Pooling layers).
_LAYER_HOOKS = {"_merge_function", "_pooling_function"}
_BITWISE = (cst.BitAnd, cst.BitOr, cst.BitXor)


def spelled_dtype(node: cst.BaseExpression, resolve) -> Dtype | None:
    """The dtype a dtype *spelling* names (``tf.float32``, ``"float32"``, ``np.int32``, ``floatx()``).

    None for spellings that are not literal (``x.dtype``, ``self.compute_dtype``): the inference
    resolves those itself.
    """
    if isinstance(node, cst.SimpleString):
        text = (node.evaluated_value or "")
        if text.startswith("mixed_"):
            return F16 if "float16" in text else BF16
        return _NAMED.get(text, INT if _INT_NAME.match(text) else None)
    if isinstance(node, cst.Call):
        name = dotted_name(node.func) or ""
        if name.endswith("floatx"):
            return F32  # keras.backend.floatx(): float32 whatever the mixed policy
        if name.endswith(("as_dtype", "DType", "dtype")) and node.args:
            return spelled_dtype(node.args[0].value, resolve)
        return None
    if isinstance(node, cst.Name):
        if node.value in ("float", "complex", "bool"):
            return _NAMED[node.value]
        if node.value == "int":
            return INT
    dotted = _without_compat(resolve(node)) or dotted_name(node) or ""
    if dotted.startswith(("tensorflow.", "numpy.", "jax.numpy.", "torch.", "keras.")) or \
            dotted.split(".")[0] in ("tf", "np", "jnp", "torch"):
        last = dotted.split(".")[-1]
        if last in _NAMED:
            return _NAMED[last]
        if _INT_NAME.match(last):
            return INT
    return None


def number(node: cst.BaseExpression) -> float | None:
    """The value of a numeric literal (with unary minus), ``float("inf")``, ``np.inf`` … or None."""
    sign = 1.0
    while isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        if isinstance(node.operator, cst.Minus):
            sign = -sign
        node = node.expression
    if isinstance(node, (cst.Float, cst.Integer)):
        try:
            return sign * float(node.evaluated_value)
        except (ValueError, OverflowError):
            return None
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "float" \
            and len(node.args) == 1 and isinstance(node.args[0].value, cst.SimpleString):
        text = (node.args[0].value.evaluated_value or "").strip().lower()
        if text in ("inf", "+inf", "-inf", "infinity", "-infinity"):
            return sign * float(text)
        return None
    dotted = dotted_name(node) if isinstance(node, cst.Attribute) else None
    if dotted and dotted.split(".")[-1] == "inf" and dotted.split(".")[0] in ("np", "numpy", "math", "jnp"):
        return sign * float("inf")
    if dotted and re.search(r"float(32|64)\.(min|max)$", dotted):
        return sign * (-3.4e38 if dotted.endswith("min") else 3.4e38)
    return None


def is_float_literal(node: cst.BaseExpression) -> bool:
    """Float literals and infinities; integers are index arithmetic far more often than masks."""
    while isinstance(node, cst.UnaryOperation):
        node = node.expression
    return not isinstance(node, cst.Integer) and number(node) is not None


def join(a: Dtype, b: Dtype) -> Dtype:
    """The dtype of ``a op b`` where a mix is allowed to stand (inside a layer: MP206's ground)."""
    if a is b:
        return a
    if a is PY:
        return b
    if b is PY:
        return a
    if CPLX in (a, b):
        return CPLX
    if F16 in (a, b):
        return F16
    if BF16 in (a, b):
        return BF16
    if UNK in (a, b):
        return UNK
    if F64 in (a, b):
        return F64
    if F32 in (a, b):
        return F32
    if INT in (a, b):
        return INT
    return BOOL


def join_all(dtypes) -> Dtype:
    result = None
    for d in dtypes:
        result = d if result is None else join(result, d)
    return UNK if result is None else result


def _arith(a: Dtype, b: Dtype, strict: bool) -> Dtype:
    """``a op b`` outside a layer (``strict``): float16 meeting float32 only runs if it is float32."""
    if strict and {a, b} in ({F16, F32}, {F16, F64}):
        return a if a.wide else b
    if strict and UNK in (a, b) and (a.wide or b.wide):
        return a if a.wide else b  # float32 op unknown: the unknown is a Python number or float32 too
    return join(a, b)


def argument(call: cst.Call, keyword: str, position: int | None) -> cst.Arg | None:
    for i, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
        if position is not None and arg.keyword is None and arg.star == "" and i == position:
            return arg
    return None


def first_arg(call: cst.Call) -> cst.BaseExpression | None:
    return call.args[0].value if call.args and call.args[0].keyword is None and not call.args[0].star else None


@dataclass
class Region:
    """A function body (or the module's top-level code) float16 tensors can reach."""

    node: cst.CSTNode
    kind: str  # "layer-call", "train-step", "loss", "tf-function", "helper", "module", "shadow"
    in_class: bool = False  # a method: ``self.compute_dtype`` is available
    owner: cst.ClassDef | None = None
    # A method of a Keras layer/model class (``call`` and what it calls): inputs are autocast to
    # the compute dtype, so a hand-made float32 tensor there is a bug (MP206), not evidence.
    layer_method: bool = False
    dtype_aware: bool = False  # tests a dtype against float16 somewhere: its constants are guarded
    env: dict[str, Dtype] = field(default_factory=dict)
    assigned: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    binops: list[cst.BinaryOperation] = field(default_factory=list)
    calls: list[cst.Call] = field(default_factory=list)  # in source order, nested classes excluded
    params: dict[str, Dtype] = field(default_factory=dict)  # dtypes learnt from the file's call sites
    nested: dict[str, cst.FunctionDef] = field(default_factory=dict)  # closures defined inside
    unpacked: dict[str, list[tuple[cst.BaseExpression, int]]] = field(default_factory=dict)
    returns: list[cst.BaseExpression] = field(default_factory=list)
    memo: dict[int, Dtype] = field(default_factory=dict)
    augmented: set[int] = field(default_factory=set)  # values of `x += value`: x keeps its dtype too
    # Parameters are what this file's callers pass (unknown without one): a library's loss helpers
    # and tf.functions get whatever their callers elsewhere made of the model outputs (often float32).
    callers_decide: bool = False
    param_dtypes: dict[str, Dtype] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name.value if isinstance(self.node, cst.FunctionDef) else "<module>"


# Placeholder values in a region's assignment table.
_FLOAT32_VARIABLE = cst.Name("__float32_variable__")
_ELEMENT = cst.Name("__element__")


class _Collector(Visitor):
    """One walk of a region: parents, guarded nodes, assignments (nested classes excluded)."""

    def __init__(self, analysis: "DtypeAnalysis", region: Region, register: bool = True) -> None:
        super().__init__()
        self.analysis = analysis
        self.region = region
        self.register = register
        self.guard_depth = 0
        self.guard_nodes: list[cst.CSTNode] = []
        self.path: list[cst.CSTNode] = []  # the nodes being visited, root first: parents for free

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Exact type tests: LibCST node classes are ABCs, and isinstance on them costs 4x `is`.
        analysis = self.analysis
        region = self.region
        node_type = type(node)
        path = self.path
        if self.register and path:
            analysis.parent[node] = path[-1]
        path.append(node)  # on_leave pops it, also for a skipped subtree
        if node is not region.node:
            if node_type is cst.ClassDef:
                return False
            if node_type is cst.FunctionDef:
                if region.kind == "module":
                    return False
                region.nested[node.name.value] = node
        if self.register:
            analysis.region_of[node] = region
            analysis.order[node] = len(analysis.order)
            if self.guard_depth:
                analysis.guarded.add(node)
        if node_type is cst.Call:
            region.calls.append(node)
        elif node_type is cst.BinaryOperation:
            region.binops.append(node)
        elif node_type is cst.Return:
            if node.value is not None:
                region.returns.append(node.value)
        elif node_type is cst.If or node_type is cst.IfExp or node_type is cst.While:
            test = node.test
            if _GUARD.search(analysis.module.code_for_node(test)):
                self.guard_depth += 1
                self.guard_nodes.append(node)
                if node_type is cst.If and re.search(r"float16|half|fp16", analysis.module.code_for_node(test)):
                    region.dtype_aware = True
        elif node_type is cst.Assign:
            for target in node.targets:
                self._bind(target.target, node.value)
        elif (node_type is cst.AnnAssign or node_type is cst.AugAssign) and node.value is not None:
            self._bind(node.target, node.value)
            if node_type is cst.AugAssign:
                region.augmented.add(id(node.value))
        elif node_type is cst.For or node_type is cst.CompFor:
            self._bind(node.target, node.iter, iterating=True)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.path.pop()
        if self.guard_nodes and self.guard_nodes[-1] is original_node:
            self.guard_nodes.pop()
            self.guard_depth -= 1

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression, iterating: bool = False) -> None:
        assigned = self.region.assigned
        if isinstance(target, cst.Name):
            if iterating:
                # for v in model.trainable_variables: float32 variables, safe to reduce.
                code = self.analysis.module.code_for_node(value)
                assigned.setdefault(target.value, []).append(
                    _FLOAT32_VARIABLE if re.search(r"variables|weights", code) else _ELEMENT)
            else:
                assigned.setdefault(target.value, []).append(value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for i, element in enumerate(target.elements):
                if isinstance(element.value, cst.Name):
                    name = element.value.value
                    assigned.setdefault(name, []).append(_ELEMENT)
                    if not iterating and not isinstance(element, cst.StarredElement):
                        self.region.unpacked.setdefault(name, []).append((value, i))


class DtypeAnalysis:
    """Regions of one module float16 can reach, with parent links and the dtype of expressions in them."""

    def __init__(self, module: cst.Module, resolve, index: dict[type, list[cst.CSTNode]] | None = None,
                 keras: int = 3) -> None:
        self.module = module
        self.index = index  # codemods._walk.nodes_by_type, shared with other analyses
        self.keras = keras
        self.resolve = lambda node: _without_compat(resolve(node))
        self.order: dict[cst.CSTNode, int] = {}  # source order of region nodes
        self.parent: dict[cst.CSTNode, cst.CSTNode] = {}
        self.region_of: dict[cst.CSTNode, Region] = {}
        self.guarded: set[cst.CSTNode] = set()
        self.regions: list[Region] = []
        self.module_constants: dict[str, cst.BaseExpression] = {}
        self.classes: dict[str, cst.ClassDef] = {}
        self.functions: dict[str, cst.FunctionDef] = {}
        self.methods: dict[cst.ClassDef, dict[str, cst.FunctionDef]] = {}
        self._float32_state: dict[cst.ClassDef, bool] = {}
        self._region_by_func: dict[cst.FunctionDef, Region] = {}
        self._attributes: dict[cst.ClassDef, dict[str, list[tuple[cst.FunctionDef, cst.BaseExpression]]]] = {}
        self._returns: dict[cst.FunctionDef, Dtype | None] = {}
        self._autocast: dict[cst.ClassDef, bool] = {}
        self._attribute_stack: set[tuple[cst.ClassDef, str]] = set()
        self._float32_layers: dict[cst.ClassDef, bool] = {}
        self._final = False
        # Names bound by imports (relative ones too): helpers from other files whose result
        # dtype this file cannot see.
        self.imported: set[str] = _imported_names(module)
        self._find_regions()
        self._final = True

    # -- regions -------------------------------------------------------------------
    def _find_regions(self) -> None:
        functions, methods = self.functions, self.methods
        seeds: list[tuple[cst.FunctionDef, str, cst.ClassDef | None]] = []
        counts: dict[str, int] = {}
        for stmt in self.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                        name = small.targets[0].target.value
                        counts[name] = counts.get(name, 0) + 1
                        self.module_constants[name] = small.value
        self.module_constants = {k: v for k, v in self.module_constants.items() if counts[k] == 1 and number(v) is not None}

        def walk_functions(body, owner: cst.ClassDef | None) -> None:
            for stmt in body:
                if isinstance(stmt, cst.ClassDef):
                    self.classes[stmt.name.value] = stmt
                    methods[stmt] = {}
                    walk_functions(stmt.body.body, stmt)
                elif isinstance(stmt, cst.FunctionDef):
                    if owner is None:
                        functions[stmt.name.value] = stmt
                    else:
                        methods[owner][stmt.name.value] = stmt
                    kind = self._seed_kind(stmt, owner)
                    if kind:
                        seeds.append((stmt, kind, owner))
                    if isinstance(stmt.body, cst.IndentedBlock):
                        # @tf.function train steps are often defined inside main().
                        walk_functions(stmt.body.body, None)
                elif isinstance(stmt, (cst.If, cst.Try, cst.With)) and isinstance(stmt.body, cst.IndentedBlock):
                    walk_functions(stmt.body.body, owner)

        self.wrapped_metrics = self._wrapped_metric_functions()
        walk_functions(self.module.body, None)
        if functions:
            # A layer's constructor that hands a module function on (`probability_fn =
            # functools.partial(_monotonic_probability_fn, ...)`): the layer runs it on its tensors.
            for cls, table in methods.items():
                if "__init__" not in table or not self.is_layer_class(cls):
                    continue
                for call in _walk_calls(table["__init__"]):
                    for arg in call.args:
                        if isinstance(arg.value, cst.Name) and arg.value.value in functions:
                            seeds.append((functions[arg.value.value], "helper", None))
        seen: set[cst.FunctionDef] = set()
        queue = list(seeds)
        while queue:
            func, kind, owner = queue.pop(0)
            if func in seen:
                continue
            seen.add(func)
            region = Region(node=func, kind=kind, in_class=owner is not None, owner=owner,
                            layer_method=owner is not None and kind in ("layer-call", "helper")
                            and self.is_layer_class(owner),
                            callers_decide=owner is None and kind in ("loss", "tf-function")
                            and not _STEP_NAME.search(func.name.value) and not self._keras_loss_signature(func))
            self._add_region(region)
            # Helpers called from a region see the same tensors.
            for call in region.calls:
                target = None
                if isinstance(call.func, cst.Name):
                    target = functions.get(call.func.value)
                elif (isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name)
                      and call.func.value.value == "self" and owner is not None):
                    target = methods[owner].get(call.func.attr.value)
                if target is not None and target not in seen:
                    helper_owner = owner if target in methods.get(owner, {}).values() else None
                    queue.append((target, "module-helper" if kind in ("module-call", "module-helper") else "helper",
                                  helper_owner))
            if region.layer_method or kind == "layer-call":
                # Module functions handed on by a layer (`functools.partial(_probability_fn, ...)`,
                # `tf.map_fn(step, x)`) run on its tensors too.
                for call in region.calls:
                    for arg in call.args:
                        target = functions.get(arg.value.value) if isinstance(arg.value, cst.Name) else None
                        if target is not None and target not in seen:
                            queue.append((target, "helper", None))
        self._add_region(Region(node=self.module, kind="module"))
        self._learn_parameters()

    def _add_region(self, region: Region) -> None:
        self.regions.append(region)
        if isinstance(region.node, cst.FunctionDef):
            self._region_by_func[region.node] = region
        _Collector(self, region).walk(region.node)
        self._compute_env(region)

    def region_for(self, func: cst.FunctionDef, owner: cst.ClassDef | None = None) -> Region:
        """The region of ``func``; a *shadow* one (params unknown, nothing registered) if float16 does not reach it."""
        region = self._region_by_func.get(func)
        if region is None:
            region = Region(node=func, kind="shadow", in_class=owner is not None, owner=owner)
            self._region_by_func[func] = region
            _Collector(self, region, register=False).walk(func)
            self._compute_env(region)
        return region

    def _owner_of(self, func: cst.FunctionDef) -> cst.ClassDef | None:
        for cls, table in self.methods.items():
            if func in table.values():
                return cls
        return None

    def is_layer_class(self, cls: cst.ClassDef) -> bool:
        """A Keras layer or model class: its ``call`` sees tensors in the compute dtype.

        Loss classes' ``call`` see float32 labels and (on Keras 3) float32 predictions."""
        for base in cls.bases:
            resolved = self.resolve(base.value) or ""
            spelled = self.module.code_for_node(base.value)
            if resolved.startswith("keras.losses") or "Loss" in spelled:
                return False
            if resolved.startswith(("keras.layers", "keras.Model", "keras.models", "keras.Layer", "keras.src.layers",
                                    "keras.src.engine.base_layer", "keras.src.models")) or \
                    re.search(r"Layer|Model|Block|Network|Encoder|Decoder|Head|Attention", spelled):
                return True
            if spelled in self.classes and self.classes[spelled] is not cls and self.is_layer_class(self.classes[spelled]):
                return True
        return False

    def is_module_class(self, cls: cst.ClassDef, depth: int = 0) -> bool:
        """A ``tf.Module`` subclass (directly or through a base class of this file)."""
        for base in cls.bases:
            if (self.resolve(base.value) or "") == "tensorflow.Module":
                return True
            parent = self.classes.get(self.module.code_for_node(base.value))
            if parent is not None and parent is not cls and depth < 5 and self.is_module_class(parent, depth + 1):
                return True
        return False

    def float32_layer(self, cls: cst.ClassDef) -> bool:
        """A layer that computes in float32: its ``__init__`` passes ``dtype="float32"`` up, or every
        construction of it in this file does (``Head(dtype="float32")``)."""
        found = self._float32_layers.get(cls)
        if found is not None:
            return found
        result = False
        init = self.methods.get(cls, {}).get("__init__")
        if init is not None:
            for call in _walk_calls(init):
                if isinstance(call.func, cst.Attribute) and call.func.attr.value == "__init__":
                    arg = argument(call, "dtype", None)
                    if arg is not None and (spelled_dtype(arg.value, self.resolve) or UNK).wide:
                        result = True
        if not result:
            name = cls.name.value
            built = [c for c in (self.index.get(cst.Call, ()) if self.index is not None else _walk_calls(self.module))
                     if isinstance(c.func, cst.Name) and c.func.value == name]
            result = bool(built) and all(
                (arg := argument(c, "dtype", None)) is not None and (spelled_dtype(arg.value, self.resolve) or UNK).wide
                for c in built)
        self._float32_layers[cls] = result
        return result

    def autocasts(self, cls: cst.ClassDef) -> bool:
        """False for layers that do not autocast (``autocast=False``, preprocessing/feature layers)."""
        found = self._autocast.get(cls)
        if found is not None:
            return found
        self._autocast[cls] = True  # recursion guard
        result = True
        for base in cls.bases:
            spelled = self.module.code_for_node(base.value)
            resolved = self.resolve(base.value) or ""
            if _NO_AUTOCAST_BASE.search(spelled) or ".preprocessing." in resolved:
                result = False
            elif spelled in self.classes and not self.autocasts(self.classes[spelled]):
                result = False
        init = self.methods.get(cls, {}).get("__init__")
        if result and init is not None:
            code = self.module.code_for_node(init)
            if re.search(r"autocast\s*=\s*False|_autocast\s*=\s*False", code):
                result = False
        self._autocast[cls] = result
        return result

    def _learn_parameters(self) -> None:
        """Parameters every call site in the file passes the same known dtype: that dtype.

        tf-models tasks cast the model's outputs with ``tf.nest.map_structure(lambda x:
        tf.cast(x, tf.float32), outputs)`` before ``self.build_losses(model_outputs=outputs)``;
        without this, every loss term in ``build_losses`` looked float16. A call site outside
        the regions (whose arguments we cannot judge) keeps the parameter as it was.
        """
        by_function = {r.node: r for r in self.regions if isinstance(r.node, cst.FunctionDef)}
        if not by_function:
            return
        seen: dict[cst.FunctionDef, dict[str, set[Dtype]]] = {}
        for call in self.all_calls:
            target = None
            if isinstance(call.func, cst.Name):
                target = self.functions.get(call.func.value)
            elif isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and \
                    call.func.value.value == "self":
                name = call.func.attr.value
                target = next((m[name] for m in self.methods.values() if name in m), None)
            region = by_function.get(target) if target is not None else None
            if region is None:
                continue
            caller = self.region_of.get(call)
            names = [p.name.value for p in [*target.params.posonly_params, *target.params.params]]
            if names and names[0] in ("self", "cls"):
                names = names[1:]
            dtypes = seen.setdefault(target, {})
            for i, arg in enumerate(call.args):
                if arg.star:
                    break
                pname = arg.keyword.value if arg.keyword is not None else (names[i] if i < len(names) else None)
                if pname is None:
                    continue
                dtype = self.dtype_at(arg.value, call, caller) if caller is not None and caller.kind != "module" else UNK
                dtypes.setdefault(pname, set()).add(dtype)
        for target, dtypes in seen.items():
            region = by_function[target]
            learnt = {name: F32 for name, ds in dtypes.items() if ds and all(d.wide for d in ds)
                      and region.env.get(name) is F16}
            if region.callers_decide:
                learnt.update({name: next(iter(ds)) for name, ds in dtypes.items() if len(ds) == 1
                               and next(iter(ds)).floating_tensor and region.env.get(name) is UNK})
            if learnt:
                region.params.update(learnt)
                self._compute_env(region)

    def _wrapped_metric_functions(self) -> set[str]:
        """Functions passed to a metric wrapper (``MeanMetricWrapper(cosine_similarity)``): it casts y_pred to float32."""
        found: set[str] = set()
        for stmt in self.module.body:
            if not isinstance(stmt, cst.ClassDef):
                continue
            bases = " ".join(dotted_name(b.value) or "" for b in stmt.bases)
            if "Metric" not in bases:
                continue
            for node in _walk_calls(stmt):
                if isinstance(node.func, cst.Attribute) and node.func.attr.value == "__init__":
                    found.update(a.value.value for a in node.args if isinstance(a.value, cst.Name))
        calls = self.index.get(cst.Call, ()) if self.index is not None else _walk_calls(self.module)
        for call in calls:
            func = call.func
            name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
            if "MetricWrapper" in name:
                found.update(a.value.value for a in call.args if isinstance(a.value, cst.Name))
        return found

    def _float32_state_class(self, owner: cst.ClassDef) -> bool:
        found = self._float32_state.get(owner)
        if found is None:  # once per class, not once per method
            found = self._float32_state[owner] = _FLOAT32_STATE_CLASS.search(
                " ".join([owner.name.value, *(self.module.code_for_node(b.value) for b in owner.bases)])) is not None
        return found

    def _seed_kind(self, func: cst.FunctionDef, owner: cst.ClassDef | None) -> str | None:
        name = func.name.value
        if owner is not None and self._float32_state_class(owner):
            # Optimizers update and regularizers penalise float32 variables (the policy's
            # variable dtype); metrics cast their inputs to their own float32 dtype.
            return None
        if owner is None and (_METRIC_FUNCTION.search(name) or name in self.wrapped_metrics):
            return None
        for decorator in func.decorators:
            target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
            if self.resolve(target) == "tensorflow.function":
                return "tf-function"
        if owner is not None and name == "call":
            if any(re.search(r"(^|\.)(Operation|Function)$", self.module.code_for_node(b.value)) for b in owner.bases):
                return None  # keras.ops' own Operation classes: called on whatever the user passes, never autocast
            return "layer-call"
        if name in ("train_step", "test_step", "predict_step", "compute_loss") or _STEP_NAME.search(name):
            return "train-step"
        if owner is not None and name == "__call__" and LOSS_NAME.search(owner.name.value):
            return "loss"
        if owner is not None and name == "__call__" and self.is_module_class(owner):
            return "module-call"  # a tf.Module layer: no autocast, but its `self.compute_dtype` may be float16
        if owner is not None and name in _LAYER_HOOKS and "call" not in self.methods.get(owner, {}) and \
                self.is_layer_class(owner):
            return "layer-call"  # Merge/Pooling layers: the base class's call runs these on the inputs
        params = [p.name.value for p in func.params.params]
        if "loss" in name.lower() and [p for p in params if p not in ("self", "cls")]:
            return "loss"
        if "y_pred" in params:
            return "loss"
        return None

    @staticmethod
    def _keras_loss_signature(func: cst.FunctionDef) -> bool:
        """``def loss(y_true, y_pred)``: a Keras loss function, given the model's raw predictions by compile."""
        return any(p.name.value == "y_pred" for p in func.params.params)

    def _signature(self, func: cst.FunctionDef) -> list[Dtype] | None:
        """Dtypes of ``@tf.function(input_signature=[tf.TensorSpec(shape, tf.float32), ...])``."""
        for decorator in func.decorators:
            call = decorator.decorator
            if not isinstance(call, cst.Call) or self.resolve(call.func) != "tensorflow.function":
                continue
            spec = argument(call, "input_signature", 1)
            if spec is None or not isinstance(spec.value, (cst.List, cst.Tuple)):
                return None
            found = []
            for element in spec.value.elements:
                value = element.value
                dtype = UNK
                if isinstance(value, cst.Call):
                    arg = argument(value, "dtype", 1)
                    dtype = (spelled_dtype(arg.value, self.resolve) or UNK) if arg is not None else F32
                found.append(dtype)
            return found
        return None

    def _compute_env(self, region: Region) -> None:
        region.env = {}
        region.memo.clear()
        if isinstance(region.node, cst.FunctionDef):
            params = region.node.params
            every = [*params.posonly_params, *params.params, *params.kwonly_params]
            signature = self._signature(region.node)
            layer_call = region.kind == "layer-call" and region.owner is not None and self.is_layer_class(region.owner)
            autocast = not layer_call or self.autocasts(region.owner)
            position = 0
            for param in every:
                pname = param.name.value
                if pname in ("self", "cls"):
                    region.env[pname] = UNK
                    continue
                if param.default is not None and not isinstance(param.default, cst.Name):
                    dtype = PY
                elif param.annotation is not None and self.module.code_for_node(param.annotation.annotation) in (
                        "int", "float", "bool", "str"):
                    dtype = PY
                elif "training" in pname or pname.startswith(("num_", "n_")):
                    dtype = PY
                elif signature is not None:
                    dtype = signature[position] if position < len(signature) else UNK
                elif region.kind in ("shadow", "module-call", "module-helper"):
                    dtype = UNK
                elif region.callers_decide:
                    dtype = region.params.get(pname, UNK)
                elif layer_call and not autocast:
                    dtype = UNK  # autocast=False / preprocessing layers keep their inputs' dtype
                elif layer_call and self.float32_layer(region.owner):
                    dtype = F32  # a float32 layer casts its (first, on tf_keras) inputs to float32
                    if self.keras == 2 and position > 0:
                        dtype = UNK
                elif layer_call and self.keras == 2 and position > 0:
                    dtype = UNK  # tf_keras autocasts only the first argument of call
                else:
                    dtype = region.params.get(pname, F16)
                region.env[pname] = dtype
                position += 1
        region.param_dtypes = dict(region.env)
        self._assign_dtypes(region)
        self._closure_params(region)
        if not region.layer_method and region.kind not in ("module", "shadow"):
            self._float32_by_use(region)

    def _closure_params(self, region: Region) -> None:
        """Parameters of functions nested in the region: the join of what its calls pass them."""
        for name, func in region.nested.items():
            sites = [c for c in region.calls if isinstance(c.func, cst.Name) and c.func.value == name]
            names = [p.name.value for p in [*func.params.posonly_params, *func.params.params]]
            for i, pname in enumerate(names):
                passed = set()
                for call in sites:
                    arg = argument(call, pname, i)
                    passed.add(self.dtype(arg.value, region) if arg is not None else UNK)
                dtype = join_all(passed) if passed and UNK not in passed else UNK
                if pname in region.assigned or (pname in region.env and region.env[pname] is not dtype):
                    dtype = UNK  # the name means two things in one flow-insensitive table
                region.env[pname] = dtype
                region.memo.clear()
        if region.nested:
            region.memo.clear()
            self._assign_dtypes(region)

    def _assign_dtypes(self, region: Region, fixed: frozenset[str] | set[str] = frozenset()) -> None:
        for name, values in region.assigned.items():
            if name in fixed:
                continue
            region.env.setdefault(name, UNK)
            # `x op= v` keeps x's dtype (or raises): augmented values only count where nothing else
            # says what x is.
            plain = [v for v in values if id(v) not in region.augmented]
            if plain:
                dtypes = {self.value_dtype(name, value, region) for value in plain}
            elif name in region.param_dtypes:
                dtypes = {region.param_dtypes[name]}
            else:
                dtypes = {self.value_dtype(name, value, region) for value in values}
            if any(d.wide for d in dtypes) and F16 in dtypes:
                # x = tf.cast(x, tf.float32) … x = tf.cast(x, dtype): flow matters, we cannot tell.
                region.env[name] = UNK
            else:
                region.env[name] = join_all(dtypes)
            region.memo.clear()
            if plain and len(plain) > 1 and region.env[name] is UNK:
                self._follow_itself(name, plain, region)

    def _follow_itself(self, name: str, values: list[cst.BaseExpression], region: Region) -> None:
        """``m = tf.cast(m, tf.float32)`` … ``m = tf.expand_dims(m, -3)``: values that follow ``m`` keep its dtype.

        A value whose dtype does not depend on the name (the cast) says what the name is; values
        that follow the name (``expand_dims``/``reshape`` of it, under a condition or not) keep that,
        so the name has the one dtype that is a fixed point. Without one it stays unknown.
        """
        def evaluated(assumed: Dtype) -> list[Dtype]:
            region.env[name] = assumed
            region.memo.clear()
            return [self.value_dtype(name, value, region) for value in values]

        as_f16, as_unknown = evaluated(F16), evaluated(UNK)
        independent = {a for a, b in zip(as_f16, as_unknown) if a is b}
        result = UNK
        if independent and UNK not in independent and not (F16 in independent and any(d.wide for d in independent)):
            guess = join_all(independent)
            if all(d is guess for d in evaluated(guess)):
                result = guess
        region.env[name] = result
        region.memo.clear()

    def value_dtype(self, name: str, value: cst.BaseExpression, region: Region) -> Dtype:
        """The dtype ``value`` gives ``name`` (an element of a tuple unpacking by its source)."""
        if value is _ELEMENT:
            for source, index in region.unpacked.get(name, ()):
                return self.element_dtype(source, index, region)
            return UNK
        return self.dtype(value, region)

    def _float32_by_use(self, region: Region) -> None:
        """Tensors that meet an explicit float32 tensor in arithmetic are float32 themselves.

        TensorFlow never promotes, so outside a layer's ``call`` (where such a mix is MP206's
        bug) code that runs at all proves the other operand float32: ``neg_log_iou * mask_``
        with ``mask_ = tf.cast(mask, tf.float32)`` makes ``iou`` — and the box areas it is
        computed from — float32, and their ``1e-8`` is not a float16 epsilon.
        """
        marked: set[str] = set()
        for _ in range(3):
            before = len(marked)
            for binop in region.binops:
                if isinstance(binop.operator, (*_BITWISE, cst.LeftShift, cst.RightShift)):
                    continue
                left, right = self.dtype(binop.left, region), self.dtype(binop.right, region)
                if left.wide and right is F16:
                    self._mark_float32(binop.right, region, marked, 0)
                elif right.wide and left is F16:
                    self._mark_float32(binop.left, region, marked, 0)
            if len(marked) == before:
                break
            self._assign_dtypes(region, fixed=marked)

    def _mark_float32(self, node: cst.BaseExpression, region: Region, marked: set[str], depth: int) -> None:
        if depth > 12:
            return
        deeper = depth + 1
        if isinstance(node, cst.Name):
            if node.value in marked or region.env.get(node.value) is not F16:
                return
            marked.add(node.value)
            region.env[node.value] = F32
            region.memo.clear()
            for value in region.assigned.get(node.value, []):
                self._mark_float32(value, region, marked, deeper)
        elif isinstance(node, cst.UnaryOperation):
            self._mark_float32(node.expression, region, marked, deeper)
        elif isinstance(node, cst.Subscript):
            self._mark_float32(node.value, region, marked, deeper)
        elif isinstance(node, cst.BinaryOperation):
            self._mark_float32(node.left, region, marked, deeper)
            self._mark_float32(node.right, region, marked, deeper)
        elif isinstance(node, cst.Call):
            resolved = self.resolve(node.func) or ""
            if not resolved.startswith("tensorflow.") or resolved.split(".")[-1] in _NOT_ELEMENTWISE:
                return
            for arg in node.args:
                if arg.keyword is None and not arg.star:
                    self._mark_float32(arg.value, region, marked, deeper)

    # -- queries -------------------------------------------------------------------
    @property
    def all_calls(self) -> list[cst.Call]:
        """Every call in the module, regions or not (layers are built outside ``call``)."""
        if not hasattr(self, "_all_calls"):
            if self.index is not None:
                self._all_calls = self.index.get(cst.Call, [])
            else:
                collector = _Calls(into_classes=True)
                collector.walk(self.module)
                self._all_calls = collector.calls
        return self._all_calls

    def in_region(self, node: cst.CSTNode) -> Region | None:
        return self.region_of.get(node)

    def is_guarded(self, node: cst.CSTNode) -> bool:
        region = self.region_of.get(node)
        return node in self.guarded or bool(region and region.dtype_aware)

    def ancestors(self, node: cst.CSTNode):
        node = self.parent.get(node)
        while node is not None:
            yield node
            node = self.parent.get(node)

    def constant(self, node: cst.BaseExpression, region: Region | None) -> tuple[float, cst.BaseExpression] | None:
        """``(value, literal node)`` of a literal, a name bound once to a literal, or an attribute
        bound to one (``self.mask_value = mask_value`` with ``mask_value=-1e9`` in ``__init__``)."""
        value = number(node)
        if value is not None:
            return value, node
        if isinstance(node, cst.Name):
            values = region.assigned.get(node.value) if region else None
            if values:
                if len(values) == 1 and number(values[0]) is not None:
                    return number(values[0]), values[0]
                return None
            if region and node.value in region.env:
                return None  # a parameter
            literal = self.module_constants.get(node.value)
            if literal is not None:
                return number(literal), literal
        if isinstance(node, cst.Attribute) and region is not None and region.owner is not None and \
                isinstance(node.value, cst.Name) and node.value.value == "self":
            return self.attribute_constant(region.owner, node.attr.value)
        return None

    def attribute_constant(self, cls: cst.ClassDef, attr: str) -> tuple[float, cst.BaseExpression] | None:
        values = self.attribute_values(cls, attr)
        if len(values) != 1:
            return None
        func, value = values[0]
        if number(value) is not None:
            return number(value), value
        if isinstance(value, cst.Name):
            for param in [*func.params.params, *func.params.kwonly_params]:
                if param.name.value == value.value and param.default is not None and number(param.default) is not None:
                    return number(param.default), param.default
        return None

    def attribute_values(self, cls: cst.ClassDef, attr: str) -> list[tuple[cst.FunctionDef, cst.BaseExpression]]:
        """Every ``self.attr = value`` in the methods of ``cls`` (and of its same-file bases)."""
        table = self._attributes.get(cls)
        if table is None:
            table = self._attributes[cls] = {}
            for func in self.methods.get(cls, {}).values():
                for assign in _assignments(func):
                    for target in assign.targets:
                        t = target.target
                        if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                            table.setdefault(t.attr.value, []).append((func, assign.value))
            for base in cls.bases:
                spelled = self.module.code_for_node(base.value)
                parent = self.classes.get(spelled)
                if parent is not None and parent is not cls:
                    for name, values in self.attribute_values_table(parent).items():
                        table.setdefault(name, list(values))
        return table.get(attr, [])

    def attribute_values_table(self, cls: cst.ClassDef):
        self.attribute_values(cls, "")
        return self._attributes[cls]

    def attribute_dtype(self, cls: cst.ClassDef, attr: str, depth: int = 0) -> Dtype:
        if attr in ("dtype", "variable_dtype", "_dtype"):
            return PY
        if attr in ("compute_dtype", "_compute_dtype"):
            return PY
        values = self.attribute_values(cls, attr)
        key = (cls, attr)
        if not values or key in self._attribute_stack:
            return UNK
        self._attribute_stack.add(key)
        try:
            dtypes = set()
            for func, value in values:
                if self._builds_layer(value):
                    return UNK
                dtypes.add(self.dtype(value, self.region_for(func, cls), depth + 1))
            return join_all(dtypes)
        finally:
            self._attribute_stack.discard(key)

    def _builds_layer(self, value: cst.BaseExpression) -> bool:
        if not isinstance(value, cst.Call):
            return False
        func = value.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        return name[:1].isupper() or name in ("Variable", "add_weight", "add_variable")

    def layer_output_dtype(self, layer: cst.BaseExpression, region: Region) -> Dtype | None:
        """The output dtype of calling ``layer`` (a constructor call or ``self.attr``) when it is built with a dtype."""
        built = None
        if isinstance(layer, cst.Call):
            built = layer
        elif isinstance(layer, cst.Attribute) and isinstance(layer.value, cst.Name) and layer.value.value == "self" \
                and region.owner is not None:
            values = self.attribute_values(region.owner, layer.attr.value)
            if len(values) == 1 and isinstance(values[0][1], cst.Call):
                built = values[0][1]
        elif isinstance(layer, cst.Name):
            values = region.assigned.get(layer.value, [])
            if len(values) == 1 and isinstance(values[0], cst.Call):
                built = values[0]
        if built is None or not self._builds_layer(built):
            return None
        dtype_arg = argument(built, "dtype", None)
        if dtype_arg is None:
            return None
        spelled = spelled_dtype(dtype_arg.value, self.resolve)
        if spelled is not None:
            return spelled
        return None

    def dtype_at(self, node: cst.BaseExpression, at: cst.CSTNode, region: Region) -> Dtype:
        """The dtype of ``node`` where ``at`` runs: a name's last assignment before it.

        ``outputs = model(x)`` … ``outputs = tf.nest.map_structure(lambda x: tf.cast(x, tf.float32),
        outputs)`` … ``self.build_losses(model_outputs=outputs)``: flow-insensitively ``outputs``
        is both float16 and float32 (unknown); at the call it is the float32 one.
        """
        for _ in range(4):
            if not (isinstance(node, cst.Name) and len(region.assigned.get(node.value, [])) > 1):
                break
            where = self.order.get(at, -1)
            before = [v for v in region.assigned[node.value] if -1 < self.order.get(v, -1) < where]
            if not before:
                break
            value = before[-1]
            if isinstance(value, cst.Call) and self.resolve(value.func) == "tensorflow.nest.map_structure" and \
                    len(value.args) == 2 and not isinstance(value.args[0].value, cst.Lambda):
                # outputs = tf.nest.map_structure(tf.math.softmax, outputs): dtype unchanged.
                node, at = value.args[1].value, value
                continue
            return self.dtype(value, region)
        return self.dtype(node, region)

    def element_dtype(self, source: cst.BaseExpression, index: int, region: Region, depth: int = 0) -> Dtype:
        """The dtype of element ``index`` of ``a, b = source`` (a model's tuple output, ``tf.split``)."""
        if isinstance(source, (cst.Tuple, cst.List)):
            elements = source.elements
            if index < len(elements) and not isinstance(elements[index], cst.StarredElement):
                return self.dtype(elements[index].value, region, depth + 1)
            return UNK
        if isinstance(source, (cst.Name, cst.Attribute, cst.Subscript)):
            # `mean, log_var = inputs`: a structure of tensors autocast as a whole (tf_keras
            # autocasts the nested structure of its first argument).
            structure = self.dtype(source, region, depth + 1)
            return structure if structure in (F16, F32, F64, BF16) else UNK
        if not isinstance(source, cst.Call):
            return UNK
        op = ops_table.op_name(self.resolve(source.func))
        if op is not None:
            short = op.split(".")[-1]
            if short in ("split", "unstack", "meshgrid", "broadcast_arrays") and source.args:
                return self.dtype(source.args[0].value, region, depth + 1)
            if short in ("top_k",):
                return self.dtype(source.args[0].value, region, depth + 1) if index == 0 else INT
            if short in ("moments", "normalize_moments"):
                return self.dtype(source.args[0].value, region, depth + 1)
            return UNK
        callee = self._same_file_function(source, region)
        if callee is not None:
            func, owner = callee
            returns = self.region_for(func, owner).returns
            found = set()
            for value in returns:
                if isinstance(value, (cst.Tuple, cst.List)) and index < len(value.elements):
                    found.add(self.dtype(value.elements[index].value, self.region_for(func, owner), depth + 1))
                else:
                    found.add(UNK)
            dtype = join_all(found)
            if dtype is not UNK:
                return dtype
        # A model's or layer's outputs (`logits, aux = self.model(x)`) are in the compute dtype.
        if self._is_model_or_layer_call(source, region):
            declared = self.layer_output_dtype(source.func, region)
            return declared or F16
        return UNK

    def _is_model_or_layer_call(self, call: cst.Call, region: Region) -> bool:
        if region.kind in ("module", "shadow"):
            return False
        name = dotted_name(call.func) or ""
        last = name.split(".")[-1]
        if name == "self":
            return region.in_class
        if "model" in last.lower() or "encoder" in last.lower() or "decoder" in last.lower():
            return True
        if isinstance(call.func, cst.Call) and self._builds_layer(call.func):
            return True
        if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and call.func.value.value == "self" \
                and region.owner is not None:
            values = self.attribute_values(region.owner, call.func.attr.value)
            return bool(values) and all(self._builds_layer(v) for _, v in values)
        return False

    def _same_file_function(self, call: cst.Call, region: Region) -> tuple[cst.FunctionDef, cst.ClassDef | None] | None:
        if isinstance(call.func, cst.Name):
            func = region.nested.get(call.func.value) or self.functions.get(call.func.value)
            if func is not None:
                return func, None
        elif isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and \
                call.func.value.value == "self" and region.owner is not None:
            func = self.methods.get(region.owner, {}).get(call.func.attr.value)
            if func is not None:
                return func, region.owner
        return None

    def return_dtype(self, func: cst.FunctionDef, owner: cst.ClassDef | None, depth: int = 0) -> Dtype:
        """What ``func`` returns when that does not depend on its arguments (float32 masks, int shapes)."""
        if func in self._returns:
            found = self._returns[func]
            return UNK if found is None else found
        self._returns[func] = None  # recursion guard
        region = self.region_for(func, owner)
        if region.kind != "shadow":
            region = self._shadow(func, owner)
        values = [v for v in region.returns if not isinstance(v, (cst.Tuple, cst.List, cst.Dict))]
        result = join_all(self.dtype(v, region, depth + 4) for v in values) if values and len(values) == len(region.returns) else UNK
        self._returns[func] = result
        return result

    def _shadow(self, func: cst.FunctionDef, owner: cst.ClassDef | None) -> Region:
        key = ("shadow", func)
        region = self._region_by_func.get(key)  # type: ignore[arg-type]
        if region is None:
            region = Region(node=func, kind="shadow", in_class=owner is not None, owner=owner)
            self._region_by_func[key] = region  # type: ignore[index]
            _Collector(self, region, register=False).walk(func)
            self._compute_env(region)
        return region

    def dtype(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> Dtype:
        """The dtype of ``node`` in ``region`` (memoized once the file's analysis is complete)."""
        if depth > 30:
            return UNK
        # Memoized per region; every change of the region's name table clears the memo.
        key = id(node)
        found = region.memo.get(key)
        if found is None:
            found = region.memo[key] = self._dtype(node, region, depth)
        return found

    def _dtype(self, node: cst.BaseExpression, region: Region, depth: int) -> Dtype:
        deeper = depth + 1
        node_type = type(node)
        if node_type is cst.Imaginary:
            return CPLX
        if node_type in (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString):
            return PY
        if number(node) is not None:
            return PY
        if node_type is cst.Name:
            value = node.value
            if value in ("True", "False", "None"):
                return PY
            if node is _FLOAT32_VARIABLE:
                return F32
            if node is _ELEMENT:
                return UNK
            if value in region.env:
                return region.env[value]
            if value in self.module_constants:
                return PY
            return UNK
        if node_type is cst.UnaryOperation:
            inner = self.dtype(node.expression, region, deeper)
            if isinstance(node.operator, cst.Not):
                return BOOL if inner not in (PY,) else PY
            return inner
        if node_type is cst.BinaryOperation:
            left, right = self.dtype(node.left, region, deeper), self.dtype(node.right, region, deeper)
            if isinstance(node.operator, _BITWISE) and BOOL in (left, right):
                return BOOL
            return _arith(left, right, strict=not region.layer_method)
        if node_type in (cst.Comparison, cst.BooleanOperation):
            parts = _comparison_parts(node)
            return PY if all(self.dtype(n, region, deeper) is PY for n in parts) else BOOL
        if node_type is cst.IfExp:
            body, orelse = self.dtype(node.body, region, deeper), self.dtype(node.orelse, region, deeper)
            if {body, orelse} in ({F16, F32}, {F16, F64}, {UNK, F32}) and self._casts_the_other(node):
                # `tf.cast(x, tf.float32) if convert else x`: cast where needed, so the float16 path is float32.
                return body if body.wide else orelse
            return join(body, orelse)
        if node_type is cst.Attribute:
            attr = node.attr.value
            if attr in ("shape", "ndim", "dtype", "compute_dtype", "variable_dtype", "name", "rank"):
                return PY
            if attr in ("real", "imag"):
                return F32
            if isinstance(node.value, cst.Name) and node.value.value == "self" and region.owner is not None:
                return self.attribute_dtype(region.owner, attr, depth)
            return UNK
        if node_type is cst.Subscript:
            return self.dtype(node.value, region, deeper)
        if node_type is cst.Call:
            return self._call_dtype(node, region, deeper)
        return UNK

    def _casts_the_other(self, node: cst.IfExp) -> bool:
        code = self.module.code_for_node
        for cast_branch, other in ((node.body, node.orelse), (node.orelse, node.body)):
            if isinstance(cast_branch, cst.Call) and (ops_table.op_name(self.resolve(cast_branch.func)) or "") in \
                    ops_table.CAST_OPS and cast_branch.args and code(cast_branch.args[0].value) == code(other):
                return True
        return False

    def dtype_of_spelling(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> Dtype:
        """What a dtype argument gives: ``tf.float32`` → float32, ``x.dtype`` → x's dtype, ``self.dtype`` → float32."""
        spelled = spelled_dtype(node, self.resolve)
        if spelled is not None:
            return spelled
        if isinstance(node, cst.Attribute):
            attr = node.attr.value
            is_self = isinstance(node.value, cst.Name) and node.value.value == "self"
            if attr in ("compute_dtype", "_compute_dtype"):
                if is_self and region.owner is not None and self.is_layer_class(region.owner) and \
                        self.float32_layer(region.owner):
                    return F32
                return F16 if is_self or region.kind not in ("module", "shadow") else UNK
            if is_self and attr in ("dtype", "variable_dtype", "_dtype") and region.owner is not None \
                    and self.is_layer_class(region.owner):
                return F32  # a layer's dtype is its variable dtype: float32 under mixed policies
            if attr == "dtype":
                inner = self.dtype(node.value, region, depth + 1)
                if inner is not PY:
                    return inner
                return F16 if region.kind not in ("module", "shadow") else UNK
        if isinstance(node, cst.Name) and node.value in ("dtype", "compute_dtype"):
            return region.env.get(node.value, F16) if region.env.get(node.value) not in (None, PY, UNK) else F16
        return F16 if region.kind not in ("module", "shadow") else UNK

    def _call_dtype(self, node: cst.Call, region: Region, depth: int) -> Dtype:
        resolved = self.resolve(node.func) or ""
        func_name = dotted_name(node.func) or ""
        if isinstance(node.func, cst.Name) and node.func.value in _PYTHON_FUNCS and not resolved:
            if node.func.value == "float" and node.args and isinstance(node.args[0].value, cst.SimpleString):
                return PY
            return PY
        if isinstance(node.func, cst.Name) and node.func.value == "complex" and not resolved:
            return CPLX
        if resolved.startswith(("math.", "numpy.", "random.", "time.")) or func_name.startswith(("np.", "math.")):
            return PY
        if resolved.endswith("backend.floatx") or func_name.endswith("floatx"):
            return PY  # a dtype name; float32 under every mixed policy
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("gradient", "jacobian") and \
                "tape" in (dotted_name(node.func.value) or "").lower():
            return F32  # gradients of the float32 variables (LossScaleOptimizer unscales in float32)
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "astype" and node.args:
            return self.dtype_of_spelling(node.args[0].value, region, depth)
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("numpy", "item", "as_list", "get_shape", "tolist",
                                                                              "num_elements"):
            return PY
        if resolved in ("tensorflow.nest.map_structure", "tensorflow.nest.map_structure_up_to") and node.args and \
                isinstance(node.args[0].value, cst.Lambda):
            # tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), outputs)
            body = node.args[0].value.body
            return self.dtype(body, region, depth) if isinstance(body, cst.Call) else UNK
        op = ops_table.op_name(resolved)
        head = func_name.split(".")[0]
        if op is None:
            if head in self.imported and not resolved.startswith("keras."):
                # A helper from another file (transformer_utils.get_padding, box_ops.compute_iou):
                # its result's dtype is decided there.
                return UNK
            if resolved.startswith("keras."):
                if isinstance(node.func, cst.Call):
                    pass
                else:
                    return UNK  # constructors
            if region.kind in ("module",):
                return UNK
            # A layer built with a dtype outputs that dtype (`self.norm = LayerNorm(dtype="float32")`).
            if isinstance(node.func, (cst.Call, cst.Attribute, cst.Name)):
                declared = self.layer_output_dtype(node.func, region)
                if declared is not None:
                    return declared
            callee = self._same_file_function(node, region)
            if callee is not None:
                returned = self.return_dtype(*callee, depth=depth)
                if returned is not UNK and returned is not PY:
                    return returned
                if callee[1] is not None and node.args:
                    # A method of this class follows its tensor arguments (float32 gradients in, float32 out).
                    joined = join_all({self.dtype(a.value, region, depth) for a in node.args if a.keyword is None})
                    return UNK if joined is PY else joined
                passed = [self.dtype(a.value, region, depth) for a in node.args if a.keyword is None]
                if any(d.floating_tensor for d in passed):
                    # A function of this file whose result follows its arguments: `_masked_maximum(d, mask32)`
                    # outside a layer only runs if `d` is float32 too.
                    folded = passed[0]
                    for d in passed[1:]:
                        folded = _arith(folded, d, strict=not region.layer_method)
                    if folded.floating_tensor:
                        return folded
                elif callee[1] is None:
                    return UNK  # a function of this file on values of unknown dtype: as unknown as they are
            if region.kind == "shadow":
                return UNK
            if isinstance(node.func, cst.Name) and node.func.value in region.param_dtypes and \
                    "model" not in node.func.value.lower():
                # A callable parameter (`distance_metric(embeddings)`): it maps its argument, whose
                # dtype is the best guess of its result's.
                passed = [self.dtype(a.value, region, depth) for a in node.args if a.keyword is None][:2]
                wide = [d for d in passed if d.wide]
                if wide:
                    return wide[0]
            return F16  # a layer, model or helper called on tensors
        short = op.split(".")[-1]
        if op in ops_table.CAST_OPS or short in ("cast", "saturate_cast"):
            dtype_arg = argument(node, "dtype", 1)
            return self.dtype_of_spelling(dtype_arg.value, region, depth) if dtype_arg else UNK
        dtype_arg = argument(node, "dtype", None)
        if op in ops_table.FLOAT_CREATORS or short in ("constant", "ones", "zeros", "convert_to_tensor"):
            if dtype_arg is not None:
                return self.dtype_of_spelling(dtype_arg.value, region, depth)
            source = ops_table.FLOAT_CREATORS.get(op) or ops_table.FLOAT_CREATORS.get(short)
            if source == "value" and node.args:
                value = node.args[-1].value if short == "fill" else node.args[0].value
                first = self.dtype(value, region, depth)
                if first is PY:
                    if isinstance(value, cst.Integer) or _all_integers(value):
                        return INT
                    return F32
                if isinstance(value, (cst.List, cst.Tuple)):
                    return F32 if not _all_integers(value) else INT
                return first
            return F32
        if op in ops_table.RANGE_OPS or short in ops_table.RANGE_OPS:
            if dtype_arg is not None:
                return self.dtype_of_spelling(dtype_arg.value, region, depth)
            args = [a.value for a in node.args if a.keyword is None]
            if any(isinstance(a, cst.Float) for a in args):
                return F32
            found = {self.dtype(a, region, depth) for a in args}
            wide = [d for d in found if d.floating_tensor]
            return wide[0] if len(wide) == 1 else INT
        if op in ops_table.INT_OPS or short in ops_table.INT_OPS:
            return INT
        if op in ops_table.BOOL_OPS or short in ops_table.BOOL_OPS:
            return BOOL
        if op in ops_table.COMPLEX_OPS or short in ops_table.COMPLEX_OPS:
            return CPLX
        if op in ops_table.REAL_OPS:
            return F32
        if op in ops_table.LIKE_OPS or short in ops_table.LIKE_OPS:
            if dtype_arg is not None:
                return self.dtype_of_spelling(dtype_arg.value, region, depth)
            return self.dtype(node.args[0].value, region, depth) if node.args else UNK
        if op.startswith(("dtypes.", "float", "int")) or short in ("float32", "float16"):
            return PY
        if dtype_arg is not None and short not in ("einsum",):
            return self.dtype_of_spelling(dtype_arg.value, region, depth)
        if short in ("where", "select", "where_v2") and len(node.args) >= 3:
            args = [node.args[1].value, node.args[2].value]
        elif short in ("one_hot",):
            return F32
        else:
            args = [a.value for a in node.args if a.keyword is None][:3]
        dtypes = [self.dtype(a, region, depth) for a in args]
        if not dtypes:
            return UNK
        if not region.layer_method and F16 in dtypes and any(d.wide for d in dtypes):
            return next(d for d in dtypes if d.wide)  # tf.maximum(x, f32) only runs if x is float32 too
        joined = join_all(dtypes)
        if joined is PY:
            return F32  # tf.sqrt(2.0): a float32 tensor
        if joined is BOOL and short not in ("logical_and", "logical_or", "logical_not", "where", "select", "stop_gradient",
                                            "identity", "reshape", "transpose", "expand_dims", "squeeze", "tile",
                                            "gather", "concat", "stack"):
            return UNK
        return joined

    # -- value ranges --------------------------------------------------------------
    def nonpositive(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> bool:
        """``node`` ≤ 0 by its form: ``-x**2``, ``-abs(x)``, ``-log(P) * i / n`` (``P`` > 1, ``i, n`` ≥ 0)."""
        if depth > 8:
            return False
        value = number(node)
        if value is not None:
            return value <= 0
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            return self.nonnegative(node.expression, region, depth + 1)
        if isinstance(node, cst.BinaryOperation):
            op = node.operator
            if isinstance(op, (cst.Multiply, cst.Divide)):
                left_neg, right_neg = self.nonpositive(node.left, region, depth + 1), self.nonpositive(node.right, region, depth + 1)
                left_pos, right_pos = self.nonnegative(node.left, region, depth + 1), self.nonnegative(node.right, region, depth + 1)
                return (left_neg and right_pos) or (left_pos and right_neg)
            if isinstance(op, cst.Subtract):
                return self._minus_own_max(node, region) or (
                    self.nonpositive(node.left, region, depth + 1) and self.nonnegative(node.right, region, depth + 1))
            if isinstance(op, cst.Add):
                return self.nonpositive(node.left, region, depth + 1) and self.nonpositive(node.right, region, depth + 1)
        if isinstance(node, cst.Name):
            values = region.assigned.get(node.value, [])
            return len(values) == 1 and self.nonpositive(values[0], region, depth + 1)
        if isinstance(node, cst.Call):
            short = (ops_table.op_name(self.resolve(node.func)) or "").split(".")[-1]
            if short in ("log_softmax", "log_sigmoid", "log_softmax_v2") or (short == "negative" and node.args and
                                                                               self.nonnegative(node.args[0].value, region, depth + 1)):
                return True
            inner = first_arg(node)
            if inner is None:
                return False
            if short in ("cumsum", "reduce_sum", "sum", "reduce_mean", "mean", "reduce_max", "max", "reduce_min", "min"):
                return self.nonpositive(inner, region, depth + 1)
            if short == "log":
                return self.at_most_one(inner, region)
        return False

    def _minus_own_max(self, node: cst.BinaryOperation, region: Region) -> bool:
        """``x - reduce_max(x, ...)`` (also ``ops.max``/``amax``, through ``stop_gradient`` and a name
        assigned once): the stable softmax/logsumexp shift, ≤ 0. ``x`` must be the same expression,
        and a name ``x`` must not be reassigned (its value could differ from the one maximised)."""
        code = self.module.code_for_node
        right, hops = node.right, 0
        while hops < 4:
            hops += 1
            if isinstance(right, cst.Name):
                values = region.assigned.get(right.value, [])
                if len(values) != 1:
                    return False
                right = values[0]
            elif isinstance(right, cst.Call) and (ops_table.op_name(self.resolve(right.func)) or "").split(".")[-1] \
                    == "stop_gradient" and first_arg(right) is not None:
                right = first_arg(right)
            else:
                break
        if not isinstance(right, cst.Call) or \
                (ops_table.op_name(self.resolve(right.func)) or "").split(".")[-1] not in ("reduce_max", "max", "amax"):
            return False
        maximised = first_arg(right)
        if maximised is None or code(maximised).strip() != code(node.left).strip():
            return False
        stack, names = [node.left], set()
        while stack:
            current = stack.pop()
            if isinstance(current, cst.Name):
                names.add(current.value)
            stack.extend(children(current))
        return all(len(region.assigned.get(name, [])) <= 1 for name in names)

    def at_most_one(self, node: cst.BaseExpression, region: Region) -> bool:
        """``node`` ≤ 1: a probability (sigmoid, softmax) or a clip whose upper bound is at most 1."""
        if not isinstance(node, cst.Call):
            return False
        short = (ops_table.op_name(self.resolve(node.func)) or "").split(".")[-1]
        if short in ("sigmoid", "softmax"):
            return True
        if short in ("clip_by_value", "clip") and len(node.args) >= 3:
            high = number(node.args[2].value)
            return high is not None and high <= 1
        return False

    def upper_bound(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> float | None:
        """A number ``node`` cannot exceed by its form: ``clip_by_value(x, lo, 10.0)``, ``minimum(x, 5.0)``,
        a literal, ``-nonnegative``, sums and products of bounded parts; None when unbounded or unknown."""
        if depth > 8:
            return None
        value = number(node)
        if value is not None:
            return value
        if self.nonpositive(node, region, depth + 1):
            return 0.0
        if isinstance(node, cst.Name):
            values = region.assigned.get(node.value, [])
            return self.upper_bound(values[0], region, depth + 1) if len(values) == 1 else None
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            left, right = self.upper_bound(node.left, region, depth + 1), self.upper_bound(node.right, region, depth + 1)
            return None if left is None or right is None else left + right
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Multiply, cst.Divide)):
            # bounded * positive constant (x / temperature with a literal temperature)
            left, factor = self.upper_bound(node.left, region, depth + 1), number(node.right)
            if left is not None and factor is not None and factor > 0:
                return left * factor if isinstance(node.operator, cst.Multiply) else left / factor
            return None
        if isinstance(node, cst.Call):
            spec = specs.known(self.resolve(node.func))
            if spec is None:
                return None
            if spec.has(specs.Kind.CLIP) and len(node.args) >= 3:
                high = argument(node, "clip_value_max", 2) or argument(node, "x_max", 2)
                return number(high.value) if high is not None else None
            if spec.short == "minimum" and len(node.args) >= 2:
                bounds = [b for b in (self.upper_bound(a.value, region, depth + 1) for a in node.args[:2]) if b is not None]
                return min(bounds) if bounds else None
            if spec.range is specs.Range.UNIT:
                return 1.0
            if spec.range is specs.Range.FOLLOWS and node.args:
                return self.upper_bound(node.args[0].value, region, depth + 1)
        return None

    def nonnegative(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> bool:
        if depth > 8:
            return False
        value = number(node)
        if value is not None:
            return value >= 0
        if isinstance(node, cst.BinaryOperation):
            op = node.operator
            if isinstance(op, cst.Power):
                exponent = number(node.right)
                return (exponent is not None and exponent % 2 == 0) or self.nonnegative(node.left, region, depth + 1)
            if isinstance(op, (cst.Multiply, cst.Divide, cst.Add)):
                same = isinstance(op, cst.Multiply) and self.module.code_for_node(node.left) == self.module.code_for_node(node.right)
                return same or (self.nonnegative(node.left, region, depth + 1) and self.nonnegative(node.right, region, depth + 1)) or \
                    (not isinstance(op, cst.Add) and self.nonpositive(node.left, region, depth + 1)
                     and self.nonpositive(node.right, region, depth + 1))
        if isinstance(node, cst.Name):
            if region.env.get(node.value, PY) in (INT, PY) and _SIZE_NAME.search(node.value) and \
                    node.value not in region.assigned:
                return True  # a size or count parameter (dim, d_model, num_heads, length)
            values = region.assigned.get(node.value, [])
            return len(values) == 1 and self.nonnegative(values[0], region, depth + 1)
        if isinstance(node, cst.Call):
            op = ops_table.op_name(self.resolve(node.func)) or ""
            short = op.split(".")[-1]
            if short in ("square", "abs", "relu", "relu6", "softplus", "exp", "sqrt", "sigmoid", "softmax", "norm",
                         "reduce_euclidean_norm", "rsqrt", "reduce_variance", "var", "std", "reduce_std", "l2_loss",
                         "size", "shape", "cosh"):
                return True
            if short in ("log",) and node.args:
                value = number(node.args[0].value)
                return value is not None and value >= 1
            if short in ("reduce_sum", "sum", "reduce_mean", "mean", "cumsum", "reduce_max", "max", "cast") and node.args:
                return self.nonnegative(node.args[0].value, region, depth + 1)
            if short in ops_table.RANGE_OPS:
                start = [a.value for a in node.args if a.keyword is None]
                return len(start) <= 1 or (number(start[0]) is not None and number(start[0]) >= 0)
            if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("log",) and node.args:
                value = number(node.args[0].value)
                return value is not None and value >= 1
            if isinstance(node.func, cst.Name) and node.func.value in ("len", "abs"):
                return True
        if isinstance(node, cst.Subscript):
            return self.nonnegative(node.value, region, depth + 1)
        return False


# TF ops whose result's dtype is not their inputs' (casts, shapes, indices, comparisons).
_NOT_ELEMENTWISE = {"cast", "saturate_cast", "shape", "size", "rank", "argmax", "argmin", "equal", "not_equal",
                    "greater", "less", "greater_equal", "less_equal", "one_hot", "range", "gather_nd", "gather",
                    "sequence_mask", "where", "map_structure", "convert_to_tensor", "constant"}


def _all_integers(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.UnaryOperation):
        return _all_integers(node.expression)
    if isinstance(node, (cst.List, cst.Tuple)):
        return all(_all_integers(e.value) for e in node.elements)
    return False


def _walk_calls(root: cst.CSTNode):
    from mpfix.codemods._walk import find_all

    return find_all(root, cst.Call)


def _assignments(func: cst.FunctionDef):
    """Every ``Assign`` in ``func``'s body (nested functions included, nested classes not)."""
    stack = [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Assign):
            yield node
        if isinstance(node, cst.ClassDef):
            continue
        if isinstance(node, (cst.BaseExpression,)):
            continue  # assignments are statements: do not walk into expressions
        stack.extend(children(node))


def _without_compat(name: str | None) -> str | None:
    """``tensorflow.compat.v1.float32`` is ``tensorflow.float32`` (``import tensorflow.compat.v1 as tf``)."""
    if name and name.startswith(("tensorflow.compat.v1.", "tensorflow.compat.v2.")):
        return "tensorflow." + name[len("tensorflow.compat.v1."):]
    return name


def _imported_names(module: cst.Module) -> set[str]:
    """Local names bound by module-level imports (inside ``if``/``try`` too), relative ones included."""
    names: set[str] = set()

    def walk(body) -> None:
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Import):
                        for alias in small.names:
                            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                                names.add(alias.asname.name.value)
                            else:
                                names.add((dotted_name(alias.name) or "").split(".")[0])
                    elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                        for alias in small.names:
                            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                                names.add(alias.asname.name.value)
                            else:
                                names.add(dotted_name(alias.name) or "")
            elif isinstance(stmt, (cst.If, cst.Try)):
                walk(stmt.body.body)
                for extra in [getattr(stmt, "orelse", None), *getattr(stmt, "handlers", ())]:
                    if extra is not None and isinstance(getattr(extra, "body", None), cst.IndentedBlock):
                        walk(extra.body.body)

    walk(module.body)
    names.discard("")
    return names


def _comparison_parts(node):
    if isinstance(node, cst.Comparison):
        return [node.left, *[c.comparator for c in node.comparisons]]
    return [node.left, node.right]


class _Calls(Visitor):
    def __init__(self, into_classes: bool = False) -> None:
        super().__init__()
        self.calls: list[cst.Call] = []
        self.into_classes = into_classes

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return self.into_classes


def dtype_analysis(context) -> DtypeAnalysis:
    """The module's analysis, computed once per file and shared by every float16 rule."""
    cached = context.cache.get("dtypes")
    if cached is None or cached.module is not context.module:
        cached = context.cache["dtypes"] = DtypeAnalysis(context.module, context.resolve, nodes_by_type(context),
                                                         keras=getattr(context, "keras", 3))
    return cached
