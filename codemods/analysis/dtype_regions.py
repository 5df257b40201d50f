"""Where float16 flows in a module: its *regions* (function bodies float16 can reach), found once per file.

A region is a layer's ``call`` (autocast inputs), a training step, a loss, a ``tf.function``, or a
helper one of those calls; the module's top-level code is a region of its own that is never float16
compute. One walk of each region (``_Collector``) records parents, source order, guarded nodes,
calls, binary operations and the assignment table the inference reads. No scope metadata is used
(10x the parse cost).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import libcst as cst

from mpfix.codemods._walk import Visitor, walk
from mpfix.codemods.analysis.bindings import BindingKind, decompose
from mpfix.codemods.analysis.dtype_syntax import blocks, walk_calls
from mpfix.codemods.analysis.dtype_lattice import Dtype, number
from mpfix.codemods.analysis.loss_calls import reached_by_compiled_losses
from mpfix.codemods.analysis.param_types import structural_layer_params
from mpfix.codemods.facts import heuristics, keras_layers
from mpfix.codemods.names import dotted_name


class RegionKind(str, Enum):
    """What a function is to the float16 analysis (a ``str``: compares equal to its value)."""

    LAYER_CALL = "layer-call"  # a Keras layer's ``call`` (autocast inputs)
    TRAIN_STEP = "train-step"
    LOSS = "loss"
    TF_FUNCTION = "tf-function"
    HELPER = "helper"  # a function or method a float16 region calls
    MODULE_CALL = "module-call"  # a ``tf.Module``'s ``__call__``: no autocast
    MODULE_HELPER = "module-helper"
    MODULE = "module"  # top-level code: never float16 compute
    SHADOW = "shadow"  # a function float16 does not reach, analysed for its return dtype


@dataclass
class Region:
    """A function body (or the module's top-level code) float16 tensors can reach."""

    node: cst.CSTNode
    kind: RegionKind
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
    iterated: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)  # `for x in value`: x's values
    returns: list[cst.BaseExpression] = field(default_factory=list)
    memo: dict[int, Dtype] = field(default_factory=dict)
    augmented: set[int] = field(default_factory=set)  # values of `x += value`: x keeps its dtype too
    # Parameters are what this file's callers pass (unknown without one): a library's loss helpers
    # and tf.functions get whatever their callers elsewhere made of the model outputs (often float32).
    callers_decide: bool = False
    param_dtypes: dict[str, Dtype] = field(default_factory=dict)
    # A Keras loss's parameters its callers decide (tf_keras y_true/y_pred, every loss's options): learnt below.
    caller_params: set[str] = field(default_factory=set)
    # Parameters every call site in the file passes float16: float32-by-use (a guess for parameters nobody
    # passes) does not override them; their mix with a float32 tensor is the bug, not evidence.
    passed_float16: set[str] = field(default_factory=set)
    spelled: dict[str, Dtype] = field(default_factory=dict)  # `dtype` parameters: what every caller spells
    # The region of the function this one is a closure of: names it reads but does not bind are that one's.
    enclosing: "Region | None" = None
    # Parameters some caller (this file or another: ``ProjectFileFacts.cross_calls``) hands an instance of a
    # project Keras layer/model class: calling one returns the compute dtype.
    layer_params: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.kind = RegionKind(self.kind)

    @property
    def name(self) -> str:
        return self.node.name.value if isinstance(self.node, cst.FunctionDef) else "<module>"


# Placeholder values in a region's assignment table.
FLOAT32_VARIABLE = cst.Name("__float32_variable__")
ELEMENT = cst.Name("__element__")


class _Collector(Visitor):
    """One walk of a region: parents, guarded nodes, assignments (nested classes excluded)."""

    def __init__(self, analysis: "RegionFinder", region: Region, register: bool = True) -> None:
        super().__init__()
        self.analysis = analysis
        self.region = region
        self.register = register
        self.guard_depth = 0
        self.nested_depth = 0
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
                self.nested_depth += 1  # its returns are its own (on_leave undoes it, also when skipped)
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
            if node.value is not None and not self.nested_depth:
                region.returns.append(node.value)
        elif node_type is cst.If or node_type is cst.IfExp or node_type is cst.While:
            test = node.test
            if heuristics.GUARD.search(analysis.module.code_for_node(test)):
                self.guard_depth += 1
                self.guard_nodes.append(node)
                if node_type is cst.If and heuristics.FLOAT16_TEST.search(analysis.module.code_for_node(test)):
                    region.dtype_aware = True
        elif node_type is cst.Assign:
            for target in node.targets:
                self._bind(target.target, node.value, node, BindingKind.ASSIGN)
        elif (node_type is cst.AnnAssign or node_type is cst.AugAssign) and node.value is not None:
            self._bind(node.target, node.value, node,
                       BindingKind.AUGMENTED if node_type is cst.AugAssign else BindingKind.ANNOTATED)
            if node_type is cst.AugAssign:
                region.augmented.add(id(node.value))
        elif node_type is cst.For:
            self._bind(node.target, node.iter, node, BindingKind.FOR)
        elif node_type is cst.CompFor:
            self._bind(node.target, node.iter, node, BindingKind.COMPREHENSION)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.path.pop()
        if type(original_node) is cst.FunctionDef and original_node is not self.region.node:
            self.nested_depth -= 1
        if self.guard_nodes and self.guard_nodes[-1] is original_node:
            self.guard_nodes.pop()
            self.guard_depth -= 1

    def _returns_variables(self, value: cst.BaseExpression) -> bool:
        """``self._freeze_vars()``: a same-class method every ``return`` of which is variables by the same test
        as an iterable's own text (``self.trainable_variables``, ``[v for v in self.trainable_variables if ...]``)."""
        owner = self.region.owner
        if owner is None or not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute) or \
                not isinstance(value.func.value, cst.Name) or value.func.value.value != "self":
            return False
        method = self.analysis.methods.get(owner, {}).get(value.func.attr.value)
        if method is None:
            return False
        module = self.analysis.module
        returns = [n.value for n in walk(method) if isinstance(n, cst.Return)]
        return bool(returns) and all(r is not None and heuristics.VARIABLES_ITERABLE.search(module.code_for_node(r))
                                     for r in returns)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression, statement: cst.CSTNode,
              kind: BindingKind) -> None:
        """The region's tables from the target's ``Binding`` records (``bindings.decompose``, the one
        decomposition): plain names of a target's top level only (attributes, subscripts and nested
        tuples are not recorded); an unpacked name is an ``ELEMENT`` of the whole value at its index."""
        region = self.region
        assigned = region.assigned
        iterating = kind is BindingKind.FOR or kind is BindingKind.COMPREHENSION
        for binding in decompose(target, value, statement, (), kind):
            name, path = binding.name, binding.path
            if "." in name or len(path) > 1 or (not path and binding.starred):
                continue
            if path:
                assigned.setdefault(name, []).append(ELEMENT)
                if not iterating and not binding.starred:
                    region.unpacked.setdefault(name, []).append((binding.source, path[0]))
            elif iterating:
                # for v in model.trainable_variables: float32 variables, safe to reduce.
                code = self.analysis.module.code_for_node(value)
                variables = heuristics.VARIABLES_ITERABLE.search(code) or self._returns_variables(value)
                assigned.setdefault(name, []).append(FLOAT32_VARIABLE if variables else ELEMENT)
                if not variables:
                    region.iterated.setdefault(name, []).append(value)
            else:
                assigned.setdefault(name, []).append(value)


class RegionFinder:
    """Finds the regions of a module and what its classes are (mixed into ``DtypeAnalysis``)."""

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
                        self.module_values.setdefault(name, []).append(small.value)
        self.module_constants = {k: v for k, v in self.module_constants.items() if counts[k] == 1 and number(v) is not None}

        closure_owner: dict[cst.FunctionDef, cst.ClassDef] = {}
        closure_of = self._closure_of

        def walk_functions(body, owner: cst.ClassDef | None, enclosing: cst.ClassDef | None = None,
                           outer: cst.FunctionDef | None = None) -> None:
            for stmt in body:
                if isinstance(stmt, cst.ClassDef):
                    self.classes[stmt.name.value] = stmt
                    methods[stmt] = {}
                    walk_functions(stmt.body.body, stmt)
                elif isinstance(stmt, cst.FunctionDef):
                    if owner is None:
                        if outer is None or stmt.name.value not in functions:
                            functions[stmt.name.value] = stmt  # a module function wins over a closure's name
                        if enclosing is not None:
                            closure_owner[stmt] = enclosing  # a closure of a method: its `self` is the method's
                        if outer is not None:
                            closure_of[stmt] = outer
                    else:
                        methods[owner][stmt.name.value] = stmt
                    kind = self._seed_kind(stmt, owner)
                    if kind:
                        seeds.append((stmt, kind, owner))
                    if isinstance(stmt.body, cst.IndentedBlock):
                        # @tf.function train steps are often defined inside main().
                        walk_functions(stmt.body.body, None, owner or enclosing, stmt)
                else:
                    for block in blocks(stmt):
                        walk_functions(block, owner, enclosing, outer)

        self.wrapped_metrics = self._wrapped_metric_functions()
        walk_functions(self.module.body, None)
        # A recursive closure refers to itself through its cell: unbound, its dicts of the module's
        # functions and classes are freed with the analysis, not left to the cyclic collector.
        walk_functions = None  # noqa: F841
        if functions:
            # A layer's constructor that hands a module function on (`probability_fn =
            # functools.partial(_monotonic_probability_fn, ...)`): the layer runs it on its tensors.
            for cls, table in methods.items():
                if "__init__" not in table or not self.is_layer_class(cls):
                    continue
                for call in walk_calls(table["__init__"]):
                    for arg in call.args:
                        if isinstance(arg.value, cst.Name) and arg.value.value in functions:
                            seeds.append((functions[arg.value.value], "helper", None))
        # Helpers that only regions whose callers decide their parameters call (a library loss helper's own
        # helpers: iou_loss -> _iou_per_anchor) get what those pass, not float16 (mp2, turn 5).
        inherits: dict[cst.FunctionDef, bool] = {}
        layer_params = self._cross_file_seeds(seeds, inherits)
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
                            callers_decide=self._callers_decide(func, kind, owner) or inherits.get(func, False),
                            layer_params=layer_params.get(func, frozenset()))
            outer = closure_of.get(func)
            if outer is not None:
                region.enclosing = self._region_by_func.get(outer) or self.region_for(outer, owner)
            self._add_region(region)
            # Helpers called from a region see the same tensors.
            for call in region.calls:
                target = None
                if isinstance(call.func, cst.Name):
                    # A closure of this function is analysed with it (its parameters are what the region
                    # passes, `_closure_params`); a sibling method's closure of the same name is not it.
                    target = functions.get(call.func.value) if call.func.value not in region.nested else None
                elif (isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name)
                      and call.func.value.value == "self" and owner is not None):
                    target = methods[owner].get(call.func.attr.value)
                if target is not None and target not in seen:
                    inherits[target] = inherits.get(target, True) and region.callers_decide
                    helper_owner = owner if target in methods.get(owner, {}).values() else closure_owner.get(target)
                    queue.append((target, "module-helper" if kind in ("module-call", "module-helper") else "helper",
                                  helper_owner))
            if region.layer_method or kind == "layer-call":
                # Module functions handed on by a layer (`functools.partial(_probability_fn, ...)`,
                # `tf.map_fn(step, x)`) run on its tensors too.
                for call in region.calls:
                    for arg in call.args:
                        target = functions.get(arg.value.value) if isinstance(arg.value, cst.Name) else None
                        if target is not None and target not in seen:
                            queue.append((target, "helper", closure_owner.get(target)))
        self._add_region(Region(node=self.module, kind="module"))
        self._learn_parameters()

    def _cross_file_seeds(self, seeds: list, inherits: dict[cst.FunctionDef, bool]) -> dict[cst.FunctionDef, frozenset[str]]:
        """Cross-file seeds (``mpfix.project.crosscalls``): a module function another file calls from float16
        code (a Keras layer's ``call``, a model's train step) is a helper, as if called in this file; one some
        caller hands a Keras layer/model instance is a region whose other parameters its callers decide."""
        layer_params: dict[cst.FunctionDef, frozenset[str]] = {}
        for call in getattr(self, "cross_calls", ()):
            func = self.functions.get(call.function)
            if func is None:
                continue
            if call.keras_instances:
                layer_params[func] = layer_params.get(func, frozenset()) | call.keras_instances
            if call.float16 or call.keras_instances:
                seeds.append((func, "helper", None))
                inherits[func] = inherits.get(func, True) and not call.float16
        # Parameters typed by what the function reads of them (``param_types``: ``net.meta``, an attribute only
        # this file's Keras model class defines): the same regions, nobody's call needed.
        vetoed = {(call.function, name) for call in getattr(self, "cross_calls", ()) for name in call.not_keras}
        for func, params in structural_layer_params(self.functions, self.classes, self.resolve, self.all_calls).items():
            params = frozenset(p for p in params if (func.name.value, p) not in vetoed)  # a plain class elsewhere
            if not params:
                continue
            layer_params[func] = layer_params.get(func, frozenset()) | params
            seeds.append((func, "helper", None))
            inherits[func] = inherits.get(func, True)
        return layer_params

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
            outer = self._closure_of.get(func)
            if outer is not None:  # a closure's free names are the enclosing function's
                region.enclosing = self._region_by_func.get(outer) or self.region_for(outer, owner)
            self._region_by_func[func] = region
            _Collector(self, region, register=False).walk(func)
            self._compute_env(region)
        return region

    def _owner_of(self, func: cst.FunctionDef) -> cst.ClassDef | None:
        for cls, table in self.methods.items():
            if func in table.values():
                return cls
        return None

    def _wrapped_metric_functions(self) -> set[str]:
        """Functions passed to a metric wrapper (``MeanMetricWrapper(cosine_similarity)``): it casts y_pred to float32."""
        found: set[str] = set()
        for stmt in self.module.body:
            if not isinstance(stmt, cst.ClassDef):
                continue
            bases = " ".join(dotted_name(b.value) or "" for b in stmt.bases)
            if "Metric" not in bases:
                continue
            for node in walk_calls(stmt):
                if isinstance(node.func, cst.Attribute) and node.func.attr.value == "__init__":
                    found.update(a.value.value for a in node.args if isinstance(a.value, cst.Name))
        calls = self.index.get(cst.Call, ()) if self.index is not None else walk_calls(self.module)
        for call in calls:
            func = call.func
            name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
            if "MetricWrapper" in name:
                found.update(a.value.value for a in call.args if isinstance(a.value, cst.Name))
        return found

    def _float32_state_class(self, owner: cst.ClassDef) -> bool:
        found = self._float32_state.get(owner)
        if found is None:  # once per class, not once per method
            found = self._float32_state[owner] = heuristics.FLOAT32_STATE_CLASS.search(
                " ".join([owner.name.value, *(self.module.code_for_node(b.value) for b in owner.bases)])) is not None
        return found

    def _seed_kind(self, func: cst.FunctionDef, owner: cst.ClassDef | None) -> str | None:
        name = func.name.value
        if owner is not None and self._float32_state_class(owner):
            # Optimizers update and regularizers penalise float32 variables (the policy's
            # variable dtype); metrics cast their inputs to their own float32 dtype.
            return None
        if owner is None and (heuristics.METRIC_FUNCTION.search(name) or name in self.wrapped_metrics):
            return None
        for decorator in func.decorators:
            target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
            if self.resolve(target) == "tensorflow.function":
                return "tf-function"
        if owner is not None and name == "call":
            if any(heuristics.OPS_OPERATION_BASE.search(self.module.code_for_node(b.value)) for b in owner.bases):
                return None  # keras.ops' own Operation classes: called on whatever the user passes, never autocast
            return "layer-call"
        if name in ("train_step", "test_step", "predict_step", "compute_loss") or heuristics.STEP_NAME.search(name):
            return "train-step"
        if owner is not None and name == "__call__" and heuristics.LOSS_NAME.search(owner.name.value):
            return "loss"
        if owner is not None and name == "__call__" and self.is_module_class(owner):
            return "module-call"  # a tf.Module layer: no autocast, but its `self.compute_dtype` may be float16
        if owner is not None and name in keras_layers.LAYER_HOOKS and "call" not in self.methods.get(owner, {}) and \
                self.is_layer_class(owner):
            return "layer-call"  # Merge/Pooling layers: the base class's call runs these on the inputs
        params = [p.name.value for p in func.params.params]
        if "loss" in name.lower() and [p for p in params if p not in ("self", "cls")]:
            return "loss"
        if "y_pred" in params:
            return "loss"
        return None

    def _callers_decide(self, func: cst.FunctionDef, kind: str, owner: cst.ClassDef | None) -> bool:
        """Parameters are what this file's callers pass: loss helpers and tf.functions of a library, and
        a layer's methods named like a loss (``add_reg_loss(self, weight)``, called from ``build`` with a
        float32 variable)."""
        if owner is not None:
            if func.name.value == "call" and keras_layers.LOSS_INPUTS.get(self.keras) != "float32" and \
                    reached_by_compiled_losses(self, owner):
                return True  # a Keras 2 Loss its file's train_step calls itself (self.loss.get(k)): mp2, turn 6
            return kind == "loss" and func.name.value != "__call__" and self.is_layer_class(owner)
        return kind in ("loss", "tf-function") and not heuristics.STEP_NAME.search(func.name.value) and \
            not self._keras_loss_signature(func)

    @staticmethod
    def _keras_loss_signature(func: cst.FunctionDef) -> bool:
        """``def loss(y_true, y_pred)``: a Keras loss function, given the model's raw predictions by compile."""
        return any(p.name.value == "y_pred" for p in func.params.params)

    def _shadow(self, func: cst.FunctionDef, owner: cst.ClassDef | None) -> Region:
        key = ("shadow", func)
        region = self._region_by_func.get(key)  # type: ignore[arg-type]
        if region is None:
            region = Region(node=func, kind="shadow", in_class=owner is not None, owner=owner)
            outer = self._closure_of.get(func)
            if outer is not None:  # a closure's free names are the enclosing function's
                region.enclosing = self._region_by_func.get(outer) or self._shadow(outer, owner)
            self._region_by_func[key] = region  # type: ignore[index]
            _Collector(self, region, register=False).walk(func)
            self._compute_env(region)
        return region
