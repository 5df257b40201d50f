"""Where float16 tensors can reach in a module, and what kind of value an expression holds.

Under ``mixed_float16`` a layer's inputs, activations and ``self.kernel`` read
as float16 inside ``Layer.call``; whatever the model returns flows into
``train_step`` bodies, custom loops (``@tf.function``) and loss functions.
Everything else in a file (configs, schedules, FLOP counters, optimizer
arguments) is plain Python or float32, and float16 numerics rules must not
flag it. This module decides, once per file, which function bodies are
*regions* float16 can reach, and gives rules a cheap, flow-insensitive guess of
each expression's kind:

- ``TENSOR``: a tensor whose dtype follows the policy (may be float16);
- ``F32``: explicitly float32 (``tf.cast(x, tf.float32)``, ``tf.ones(n)``) — safe
  from float16 overflow, but an ``InvalidArgumentError`` when mixed with float16;
- ``INT``: integer/bool tensors (``tf.shape(x)``), ``PY``: Python numbers;
- ``UNKNOWN``: anything we cannot tell (attributes such as ``self.epsilon``,
  results of unknown calls at module level). Rules never flag on UNKNOWN alone.

No scope metadata is used (10x the parse cost, see DESIGN.md): regions are
found by walking function definitions, names by a per-region assignment table.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from enum import Enum

import libcst as cst

from mpfix.codemods._walk import Visitor, children, nodes_by_type
from mpfix.codemods.names import dotted_name

FLOAT16_MAX = 65504.0
FLOAT16_SMALLEST_NORMAL = 2.0 ** -14  # ≈ 6.1e-5
# A float16-safe additive mask: exp(-3e4) is 0 and two of them still sum below 65504.
SAFE_MASK = "3e4"
# A float16-safe epsilon: a normal float16 number (≥ 6.1e-5), so it neither vanishes nor
# makes x / eps overflow for |x| ≤ 6.5 (1e-8 becomes 0; 1e-7 a subnormal 1.19e-7).
SAFE_EPSILON = "1e-4"


class Kind(Enum):
    TENSOR = "tensor"
    F32 = "float32"
    INT = "int"
    PY = "python"
    UNKNOWN = "unknown"


def to_float16(value: float) -> float:
    """``value`` rounded to float16 exactly as TensorFlow converts a Python float (inf on overflow)."""
    try:
        return struct.unpack("<e", struct.pack("<e", value))[0]
    except OverflowError:
        # struct refuses values that round past 65504; IEEE round-to-nearest gives inf.
        return float("inf") if value > 0 else float("-inf")


def describe_float16(value: float) -> str:
    """What ``value`` becomes in float16, in words: ``0.0``, ``-inf``, ``a subnormal 1.19e-07``."""
    half = to_float16(value)
    if half == 0.0:
        return "0.0"
    if half in (float("inf"), float("-inf")):
        return "-inf" if half < 0 else "inf"
    if abs(half) < FLOAT16_SMALLEST_NORMAL:
        return f"a subnormal {half:.3g}"
    return f"{half:.5g}"


def epsilon_vanishes(value: float) -> bool:
    """True if a positive epsilon becomes 0 in float16, or a subnormal more than 10% off.

    1e-8 and 1e-12 become 0.0 (smallest subnormal ≈ 6e-8); 1e-7 becomes 1.19e-7 (19% off,
    and x / 1.19e-7 overflows for |x| > 0.008). 1e-6 is a subnormal within 1.3%, and
    1e-5/1e-6 layer-norm epsilons are common and harmless, so they are not flagged.
    """
    if not 0.0 < value < FLOAT16_SMALLEST_NORMAL:
        return False
    half = to_float16(value)
    return half == 0.0 or abs(half - value) / value > 0.10


_FLOAT32_DTYPES = {"tensorflow.float32", "tensorflow.dtypes.float32", "numpy.float32", "tensorflow.float64",
                   "tensorflow.dtypes.float64", "numpy.float64"}
_INT_DTYPES = re.compile(r"(^|\.)u?int(8|16|32|64)$|(^|\.)bool$")
_FLOAT32_STATE_CLASS = re.compile(r"Optimizer|Regularizer|Metric|Constraint|Initializer|Schedule")
# Metric functions (keras.metrics.pearson_correlation): Keras' metric wrappers cast y_pred to float32.
_METRIC_FUNCTION = re.compile(r"accuracy|correlation|metric|precision|recall|_auc$|iou_score")
_PYTHON_FUNCS = {"len", "int", "float", "round", "abs", "sum", "min", "max", "range", "pow", "divmod", "bool", "str"}
_INT_OPS = {"shape", "size", "rank", "argmax", "argmin", "range", "math.argmax", "math.argmin", "equal",
            "not_equal", "greater", "less", "greater_equal", "less_equal", "logical_and", "logical_or",
            "logical_not", "math.equal", "math.greater", "math.less", "sequence_mask", "where_v2",
            "math.count_nonzero", "searchsorted", "unique", "math.logical_and", "math.logical_not"}
# TF ops that create a float32 tensor unless given a dtype.
_CREATE_OPS = {"constant", "ones", "zeros", "fill", "eye", "linspace", "random.normal", "random.uniform",
               "random.truncated_normal", "convert_to_tensor", "math.linspace"}
# Ops whose result has the dtype of their first argument.
_LIKE_OPS = {"ones_like", "zeros_like", "identity", "stop_gradient"}
LOSS_NAME = re.compile(r"loss|penalt|regulari", re.IGNORECASE)
_STEP_NAME = re.compile(r"(^|_)(train|test|eval|val|predict|valid|validation)?_?step(_fn)?$|^step_fn$")
_GUARD = re.compile(r"float16|half|fp16|bfloat16|\.dtype|compute_dtype|mixed")


def dtype_kind(node: cst.BaseExpression, resolve) -> Kind:
    """The kind a dtype argument (``tf.float32``, ``"float32"``, ``x.dtype``) produces."""
    if isinstance(node, cst.SimpleString):
        text = node.evaluated_value
        if text in ("float32", "float64", "double"):
            return Kind.F32
        if _INT_DTYPES.search(text or ""):
            return Kind.INT
        return Kind.TENSOR
    name = resolve(node) or dotted_name(node) or ""
    if name in _FLOAT32_DTYPES or name in ("float",) or name.endswith((".float32", ".float64")):
        return Kind.F32
    if isinstance(node, cst.Call) and (dotted_name(node.func) or "").endswith("floatx"):
        return Kind.F32  # keras.backend.floatx(): float32 whatever the mixed policy
    if _INT_DTYPES.search(name) or name == "int":
        return Kind.INT
    return Kind.TENSOR


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


@dataclass
class Region:
    """A function body (or the module's top-level code) float16 tensors can reach."""

    node: cst.CSTNode
    kind: str  # "layer-call", "train-step", "loss", "tf-function", "helper", "module"
    in_class: bool = False  # a method: ``self.compute_dtype`` is available
    owner: cst.ClassDef | None = None
    # A method of a Keras layer/model class (``call`` and what it calls): inputs are autocast to
    # the compute dtype, so a hand-made float32 tensor there is a bug (MP206), not evidence.
    layer_method: bool = False
    dtype_aware: bool = False  # tests a dtype against float16 somewhere: its constants are guarded
    env: dict[str, Kind] = field(default_factory=dict)
    assigned: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    binops: list[cst.BinaryOperation] = field(default_factory=list)
    calls: list[cst.Call] = field(default_factory=list)  # in source order, nested classes excluded
    params: dict[str, Kind] = field(default_factory=dict)  # kinds learnt from the file's call sites

    @property
    def name(self) -> str:
        return self.node.name.value if isinstance(self.node, cst.FunctionDef) else "<module>"


class _Collector(Visitor):
    """One walk of a region: parents, guarded nodes, assignments (nested classes excluded)."""

    def __init__(self, analysis: "Float16Scope", region: Region) -> None:
        super().__init__()
        self.analysis = analysis
        self.region = region
        self.guard_depth = 0
        self.guard_nodes: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Exact type tests: LibCST node classes are ABCs, and isinstance on them costs 4x `is`
        # (this runs on every node of every region). None of these classes has subclasses.
        analysis = self.analysis
        node_type = type(node)
        if node is not self.region.node:
            if node_type is cst.ClassDef:
                return False
            if node_type is cst.FunctionDef and self.region.kind == "module":
                return False
        parent = analysis.parent
        for child in children(node):
            parent[child] = node
        analysis.region_of[node] = self.region
        analysis.order[node] = len(analysis.order)
        if self.guard_depth:
            analysis.guarded.add(node)
        if node_type is cst.Call:
            self.region.calls.append(node)
        elif node_type is cst.BinaryOperation:
            self.region.binops.append(node)
        elif node_type is cst.If or node_type is cst.IfExp or node_type is cst.While:
            test = node.test
            if _GUARD.search(analysis.module.code_for_node(test)):
                self.guard_depth += 1
                self.guard_nodes.append(node)
                if node_type is cst.If and re.search(r"float16|half|fp16", analysis.module.code_for_node(test)):
                    self.region.dtype_aware = True
        elif node_type is cst.Assign:
            for target in node.targets:
                self._bind(target.target, node.value)
        elif (node_type is cst.AnnAssign or node_type is cst.AugAssign) and node.value is not None:
            self._bind(node.target, node.value)
        elif node_type is cst.For or node_type is cst.CompFor:
            self._bind(node.target, node.iter, iterating=True)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self.guard_nodes and self.guard_nodes[-1] is original_node:
            self.guard_nodes.pop()
            self.guard_depth -= 1

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression, iterating: bool = False) -> None:
        if isinstance(target, cst.Name):
            if iterating:
                # for v in model.trainable_variables: float32 variables, safe to reduce.
                code = self.analysis.module.code_for_node(value)
                kind_value: cst.BaseExpression = (cst.Name("__float32_variable__") if re.search(r"variables|weights", code)
                                                  else cst.Name("__element__"))
                self.region.assigned.setdefault(target.value, []).append(kind_value)
            else:
                self.region.assigned.setdefault(target.value, []).append(value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                if isinstance(element.value, cst.Name):
                    self.region.assigned.setdefault(element.value.value, []).append(cst.Name("__element__"))


class Float16Scope:
    """Regions of one module float16 can reach, with parent links and name kinds inside them."""

    def __init__(self, module: cst.Module, resolve, index: dict[type, list[cst.CSTNode]] | None = None) -> None:
        self.module = module
        self.index = index  # codemods._walk.nodes_by_type, shared with other analyses
        self.resolve = lambda node: _without_compat(resolve(node))
        self.order: dict[cst.CSTNode, int] = {}  # source order of region nodes
        self.parent: dict[cst.CSTNode, cst.CSTNode] = {}
        self.region_of: dict[cst.CSTNode, Region] = {}
        self.guarded: set[cst.CSTNode] = set()
        self.regions: list[Region] = []
        self.module_constants: dict[str, cst.BaseExpression] = {}
        self.classes: dict[str, cst.ClassDef] = {}
        self._float32_state: dict[cst.ClassDef, bool] = {}
        # Names bound by imports (relative ones too): helpers from other files whose result
        # dtype this file cannot see.
        self.imported: set[str] = _imported_names(module)
        self._find_regions()

    # -- regions -------------------------------------------------------------------
    def _find_regions(self) -> None:
        functions: dict[str, cst.FunctionDef] = {}
        methods: dict[cst.ClassDef, dict[str, cst.FunctionDef]] = {}
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

        walk_functions(self.module.body, None)
        seen: set[cst.FunctionDef] = set()
        queue = list(seeds)
        while queue:
            func, kind, owner = queue.pop(0)
            if func in seen:
                continue
            seen.add(func)
            region = Region(node=func, kind=kind, in_class=owner is not None, owner=owner,
                            layer_method=owner is not None and kind in ("layer-call", "helper")
                            and self.is_layer_class(owner))
            self._add_region(region)
            # Helpers called from a region see the same tensors.
            for call in region.calls:
                target = None
                if isinstance(call.func, cst.Name):
                    target = functions.get(call.func.value)
                    if target is None and owner is not None:
                        target = None
                elif (isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name)
                      and call.func.value.value == "self" and owner is not None):
                    target = methods[owner].get(call.func.attr.value)
                if target is not None and target not in seen:
                    helper_owner = owner if target in methods.get(owner, {}).values() else None
                    queue.append((target, "helper", helper_owner))
        self._add_region(Region(node=self.module, kind="module"))
        self._learn_parameters(functions, methods)

    def _kind_at(self, node: cst.BaseExpression, at: cst.CSTNode, region: Region) -> Kind:
        """The kind of ``node`` where ``at`` runs: a name's last assignment before it.

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
            return self.kind(value, region)
        return self.kind(node, region)

    def is_layer_class(self, cls: cst.ClassDef) -> bool:
        """A Keras layer or model class: its ``call`` sees tensors in the compute dtype.

        Loss classes' ``call`` see float32 labels and (on Keras 3) float32 predictions."""
        for base in cls.bases:
            resolved = self.resolve(base.value) or ""
            spelled = self.module.code_for_node(base.value)
            if resolved.startswith("keras.losses") or "Loss" in spelled:
                return False
            if resolved.startswith(("keras.layers", "keras.Model", "keras.models", "keras.Layer")) or \
                    re.search(r"Layer|Model|Block|Network|Encoder|Decoder|Head|Attention", spelled):
                return True
        return False

    def _learn_parameters(self, functions, methods) -> None:
        """Parameters every call site in the file passes a float32 tensor: float32, not float16.

        tf-models tasks cast the model's outputs with ``tf.nest.map_structure(lambda x:
        tf.cast(x, tf.float32), outputs)`` before ``self.build_losses(model_outputs=outputs)``;
        without this, every loss term in ``build_losses`` looked float16. A call site outside
        the regions (whose arguments we cannot judge) keeps the parameter as it was.
        """
        by_function = {r.node: r for r in self.regions if isinstance(r.node, cst.FunctionDef)}
        if not by_function:
            return
        seen: dict[cst.FunctionDef, dict[str, set[Kind]]] = {}
        for call in self.all_calls:
            target = None
            if isinstance(call.func, cst.Name):
                target = functions.get(call.func.value)
            elif isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and \
                    call.func.value.value == "self":
                name = call.func.attr.value
                target = next((m[name] for m in methods.values() if name in m), None)
            region = by_function.get(target) if target is not None else None
            if region is None:
                continue
            caller = self.region_of.get(call)
            names = [p.name.value for p in [*target.params.posonly_params, *target.params.params]]
            if names and names[0] in ("self", "cls"):
                names = names[1:]
            kinds = seen.setdefault(target, {})
            for i, arg in enumerate(call.args):
                if arg.star:
                    break
                pname = arg.keyword.value if arg.keyword is not None else (names[i] if i < len(names) else None)
                if pname is None:
                    continue
                kind = self._kind_at(arg.value, call, caller) if caller is not None and caller.kind != "module" \
                    else Kind.UNKNOWN
                kinds.setdefault(pname, set()).add(kind)
        for target, kinds in seen.items():
            region = by_function[target]
            learnt = {name: Kind.F32 for name, ks in kinds.items() if ks == {Kind.F32} and region.env.get(name) is Kind.TENSOR}
            if learnt:
                region.params.update(learnt)
                self._compute_env(region)

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
        if owner is None and _METRIC_FUNCTION.search(name):
            return None
        for decorator in func.decorators:
            target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
            if self.resolve(target) == "tensorflow.function":
                return "tf-function"
        if owner is not None and name == "call":
            return "layer-call"
        if name in ("train_step", "test_step", "predict_step", "compute_loss") or _STEP_NAME.search(name):
            return "train-step"
        if owner is not None and name == "__call__" and LOSS_NAME.search(owner.name.value):
            return "loss"
        params = [p.name.value for p in func.params.params]
        if "loss" in name.lower() and [p for p in params if p not in ("self", "cls")]:
            return "loss"
        if "y_pred" in params:
            return "loss"
        return None

    def _add_region(self, region: Region) -> None:
        self.regions.append(region)
        _Collector(self, region).walk(region.node)
        self._compute_env(region)

    def _compute_env(self, region: Region) -> None:
        region.env = {}
        if isinstance(region.node, cst.FunctionDef):
            params = region.node.params
            for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
                pname = param.name.value
                if pname in ("self", "cls"):
                    region.env[pname] = Kind.UNKNOWN
                elif param.default is not None and not isinstance(param.default, cst.Name):
                    region.env[pname] = Kind.PY
                elif param.annotation is not None and self.module.code_for_node(param.annotation.annotation) in (
                        "int", "float", "bool", "str"):
                    region.env[pname] = Kind.PY
                elif "training" in pname or pname.startswith(("num_", "n_")):
                    region.env[pname] = Kind.PY
                else:
                    region.env[pname] = region.params.get(pname, Kind.TENSOR)
        self._assign_kinds(region)
        if not region.layer_method and region.kind != "module":
            self._float32_by_use(region)

    def _assign_kinds(self, region: Region, fixed: set[str] = frozenset()) -> None:
        for name, values in region.assigned.items():
            if name in fixed:
                continue
            region.env.setdefault(name, Kind.UNKNOWN)
            kinds = {self.kind(value, region) for value in values}
            if {Kind.F32, Kind.TENSOR} <= kinds:
                # x = tf.cast(x, tf.float32) … x = tf.cast(x, dtype): flow matters, we cannot tell.
                region.env[name] = Kind.UNKNOWN
            else:
                region.env[name] = _join_all(kinds)

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
                if isinstance(binop.operator, (cst.BitAnd, cst.BitOr, cst.BitXor, cst.LeftShift, cst.RightShift)):
                    continue
                left, right = self.kind(binop.left, region), self.kind(binop.right, region)
                if left is Kind.F32 and right is Kind.TENSOR:
                    self._mark_float32(binop.right, region, marked, 0)
                elif right is Kind.F32 and left is Kind.TENSOR:
                    self._mark_float32(binop.left, region, marked, 0)
            if len(marked) == before:
                break
            self._assign_kinds(region, fixed=marked)

    def _mark_float32(self, node: cst.BaseExpression, region: Region, marked: set[str], depth: int) -> None:
        if depth > 12:
            return
        deeper = depth + 1
        if isinstance(node, cst.Name):
            if node.value in marked or region.env.get(node.value) is not Kind.TENSOR:
                return
            marked.add(node.value)
            region.env[node.value] = Kind.F32
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
        """``(value, literal node)`` of a literal, or of a name bound once to a literal."""
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
        return None

    def kind(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> Kind:
        if depth > 30:
            return Kind.UNKNOWN
        deeper = depth + 1
        if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                             cst.FormattedString)):
            return Kind.PY
        if number(node) is not None:
            return Kind.PY
        if isinstance(node, cst.Name):
            if node.value in ("True", "False", "None"):
                return Kind.PY
            if node.value == "__float32_variable__":
                return Kind.F32
            if node.value == "__element__":
                return Kind.UNKNOWN
            if node.value in region.env:
                return region.env[node.value]
            if node.value in self.module_constants:
                return Kind.PY
            return Kind.UNKNOWN
        if isinstance(node, cst.UnaryOperation):
            return self.kind(node.expression, region, deeper)
        if isinstance(node, cst.BinaryOperation):
            left, right = self.kind(node.left, region, deeper), self.kind(node.right, region, deeper)
            if not region.layer_method and {left, right} == {Kind.F32, Kind.TENSOR}:
                # No implicit promotion: outside a layer's call (MP206's ground) a mix that runs is float32.
                return Kind.F32
            return _join(left, right)
        if isinstance(node, (cst.Comparison, cst.BooleanOperation)):
            return Kind.PY if all(self.kind(n, region, deeper) is Kind.PY for n in _comparison_parts(node)) else Kind.INT
        if isinstance(node, cst.IfExp):
            return _join(self.kind(node.body, region, deeper), self.kind(node.orelse, region, deeper))
        if isinstance(node, cst.Attribute):
            if node.attr.value in ("shape", "ndim", "dtype", "compute_dtype", "variable_dtype", "name", "rank"):
                return Kind.PY
            return Kind.UNKNOWN
        if isinstance(node, cst.Subscript):
            base = self.kind(node.value, region, deeper)
            return base
        if isinstance(node, (cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp, cst.GeneratorExp, cst.Lambda)):
            return Kind.UNKNOWN
        if isinstance(node, cst.Call):
            return self._call_kind(node, region, deeper)
        return Kind.UNKNOWN

    def _call_kind(self, node: cst.Call, region: Region, depth: int) -> Kind:
        resolved = self.resolve(node.func) or ""
        func_name = dotted_name(node.func) or ""
        if isinstance(node.func, cst.Name) and node.func.value in _PYTHON_FUNCS and not resolved:
            return Kind.PY
        if resolved.startswith(("math.", "numpy.", "random.", "time.")) or func_name.startswith(("np.", "math.")):
            return Kind.PY
        if resolved.endswith("backend.floatx") or func_name.endswith("floatx"):
            return Kind.PY  # a dtype name; float32 under every mixed policy
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("gradient", "jacobian") and \
                "tape" in (dotted_name(node.func.value) or "").lower():
            return Kind.F32  # gradients of the float32 variables (LossScaleOptimizer unscales in float32)
        if isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Name) and \
                node.func.value.value == "self" and region.owner is not None and node.args and \
                any(isinstance(st, cst.FunctionDef) and st.name.value == node.func.attr.value for st in region.owner.body.body):
            # A method of this class (not a layer attribute): its result follows its tensor arguments;
            # on float32 gradients it is float32, on arguments we cannot tell it is unknown.
            joined = _join_all({self.kind(a.value, region, depth) for a in node.args if a.keyword is None})
            return Kind.UNKNOWN if joined is Kind.PY else joined
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "astype" and node.args:
            return dtype_kind(node.args[0].value, self.resolve)
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("numpy", "item", "as_list", "get_shape", "tolist",
                                                                              "num_elements"):
            return Kind.PY
        if resolved in ("tensorflow.nest.map_structure", "tensorflow.nest.map_structure_up_to") and node.args and \
                isinstance(node.args[0].value, cst.Lambda):
            # tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), outputs)
            body = node.args[0].value.body
            return self.kind(body, region, depth) if isinstance(body, cst.Call) else Kind.UNKNOWN
        op = None
        for prefix in ("tensorflow.", "keras.ops.", "keras.backend."):
            if resolved.startswith(prefix):
                op = resolved[len(prefix):]
                break
        head = func_name.split(".")[0]
        if op is None and head in self.imported:
            # A helper from another file (transformer_utils.get_padding, box_ops.compute_iou):
            # its result's dtype is decided there. Keras layer classes called here are constructors.
            return Kind.UNKNOWN
        if op is None:
            if resolved.startswith("keras.layers.") or resolved.startswith("keras."):
                return Kind.UNKNOWN  # constructors
            if region.kind == "module":
                return Kind.UNKNOWN
            return Kind.TENSOR  # a layer, model or helper called on tensors
        short = op.split(".")[-1]
        dtype_arg = _argument(node, "dtype", 1 if short in ("cast", "saturate_cast") else None)
        if short in ("cast", "saturate_cast"):
            return dtype_kind(dtype_arg.value, self.resolve) if dtype_arg else Kind.UNKNOWN
        if op in _CREATE_OPS or short in ("constant", "ones", "zeros", "convert_to_tensor"):
            if dtype_arg is not None:
                return dtype_kind(dtype_arg.value, self.resolve)
            if short == "convert_to_tensor" and node.args:
                first = self.kind(node.args[0].value, region, depth)
                return first if first is not Kind.PY else Kind.F32
            if short == "constant" and node.args and isinstance(node.args[0].value, cst.Integer):
                return Kind.INT
            return Kind.F32
        if op in _INT_OPS or short in ("shape", "size", "rank", "argmax", "argmin", "range"):
            if short == "range" and dtype_arg is not None:
                return dtype_kind(dtype_arg.value, self.resolve)
            return Kind.INT
        if short in _LIKE_OPS:
            if dtype_arg is not None:
                return dtype_kind(dtype_arg.value, self.resolve)
            return self.kind(node.args[0].value, region, depth) if node.args else Kind.UNKNOWN
        if op.startswith(("dtypes.", "float", "int")) or short in ("float32", "float16"):
            return Kind.PY
        kinds = [self.kind(a.value, region, depth) for a in node.args if a.keyword is None][:3]
        if not kinds:
            return Kind.UNKNOWN
        if not region.layer_method and {Kind.F32, Kind.TENSOR} <= set(kinds):
            return Kind.F32  # tf.maximum(x, f32) only runs if x is float32 too
        joined = _join_all(set(kinds))
        if joined is Kind.PY:
            return Kind.F32  # tf.sqrt(2.0): a float32 tensor
        return joined


# TF ops whose result's dtype is not their inputs' (casts, shapes, indices, comparisons).
_NOT_ELEMENTWISE = {"cast", "saturate_cast", "shape", "size", "rank", "argmax", "argmin", "equal", "not_equal",
                    "greater", "less", "greater_equal", "less_equal", "one_hot", "range", "gather_nd", "gather",
                    "sequence_mask", "where", "map_structure", "convert_to_tensor", "constant"}


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


def _join(a: Kind, b: Kind) -> Kind:
    if Kind.TENSOR in (a, b):
        return Kind.TENSOR
    if Kind.UNKNOWN in (a, b):
        return Kind.UNKNOWN
    if Kind.F32 in (a, b):
        return Kind.F32
    if Kind.INT in (a, b):
        return Kind.INT
    return Kind.PY


def _join_all(kinds: set[Kind]) -> Kind:
    result = Kind.PY
    for k in kinds or {Kind.UNKNOWN}:
        result = _join(result, k)
    return result


def _argument(call: cst.Call, keyword: str, position: int | None) -> cst.Arg | None:
    for i, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
        if position is not None and arg.keyword is None and arg.star == "" and i == position:
            return arg
    return None


argument = _argument


class _Calls(Visitor):
    def __init__(self, into_classes: bool = False) -> None:
        super().__init__()
        self.calls: list[cst.Call] = []
        self.into_classes = into_classes

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return self.into_classes


def float16_scope(context) -> Float16Scope:
    """The module's analysis, computed once per file and shared by every float16 rule."""
    cached = context.cache.get("float16_scope")
    if cached is None or cached.module is not context.module:
        cached = context.cache["float16_scope"] = Float16Scope(context.module, context.resolve,
                                                               nodes_by_type(context))
    return cached


def arithmetic_root(scope: Float16Scope, node: cst.CSTNode) -> cst.CSTNode:
    """The outermost arithmetic expression ``node`` is part of (``scores + (1 - m) * -1e9``)."""
    current = node
    parent = scope.parent.get(current)
    while isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)) and not isinstance(
            getattr(parent, "operator", None), (cst.MatrixMultiply,)):
        current = parent
        parent = scope.parent.get(current)
    return current


def tf_spelling(context) -> tuple[str, tuple[str, ...]]:
    """How the file spells the ``tensorflow`` module, and the import to add if it cannot."""
    local = context.imports.local_name_for("tensorflow")
    if local and "." not in local:
        return local, ()
    return "tf", ("import tensorflow as tf",)


def expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def is_simple(node: cst.BaseExpression) -> bool:
    """A name or attribute chain: repeating it (``x.dtype``) evaluates nothing twice."""
    return dotted_name(node) is not None
