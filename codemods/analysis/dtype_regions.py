"""Where float16 flows in a module: its *regions* (function bodies float16 can reach), found once per file.

A region is a layer's ``call`` (autocast inputs), a training step, a loss, a ``tf.function``, or a
helper one of those calls; the module's top-level code is a region of its own that is never float16
compute. One walk of each region (``_Collector``) records parents, source order, guarded nodes,
calls, binary operations and the assignment table the inference reads. No scope metadata is used
(10x the parse cost).
"""

from __future__ import annotations

from collections import ChainMap

import libcst as cst

from mpfix.codemods.analysis.dtype_syntax import blocks, walk_calls
from mpfix.codemods.analysis.dtype_lattice import number
from mpfix.codemods.analysis.gradient_syntax import taped_functions
from mpfix.codemods.analysis.dtype_tables import (  # noqa: F401  (the tables, re-exported)
    ELEMENT, FLOAT32_VARIABLE, Region, RegionKind, _Collector,
)
from mpfix.codemods.analysis.loss_calls import reached_by_compiled_losses
from mpfix.codemods.analysis.param_types import structural_layer_params
from mpfix.codemods.facts import heuristics, keras_layers, ops
from mpfix.codemods.names import dotted_name


class RegionFinder:
    """Finds the regions of a module and what its classes are (mixed into ``DtypeAnalysis``)."""

    def _find_regions(self) -> None:
        functions, methods = self.functions, self.methods
        self._seeded: set[cst.FunctionDef] = set()
        seeds: list[tuple[cst.FunctionDef, str, cst.ClassDef | None]] = []
        counts: dict[str, int] = {}
        self._taped = taped_functions(self.module, self.resolve, self.index)  # called in a GradientTape block
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
        listed = {id(func) for func, _, _ in seeds}
        seeds.extend((func, "tf-function", None) for func in self._dataset_functions() if id(func) not in listed)
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
        self._seeded = {func for func, _, _ in seeds}  # nested seeds are regions of their own, not closures
        seen: set[cst.FunctionDef] = set()
        queue = list(seeds)
        # Last, module functions a GradientTape block calls that no region reached: losses, whatever their name.
        late = [(functions[name], "loss", None) for name in sorted(self._taped) if name in functions]
        while queue or late:
            if not queue:
                queue, late = late, []
            func, kind, owner = queue.pop(0)
            if func in seen or getattr(self._region_by_func.get(func), "closure", False):
                continue  # a closure is analysed with the function around it
            seen.add(func)
            region = Region(node=func, kind=kind, in_class=owner is not None, owner=owner,
                            layer_method=owner is not None and kind in ("layer-call", "helper")
                            and self.is_layer_class(owner),
                            callers_decide=self._callers_decide(func, kind, owner) or inherits.get(func, False),
                            layer_params=layer_params.get(func, frozenset()))
            outer = closure_of.get(func)
            if outer is not None:
                enclose(region, self._region_by_func.get(outer) or self.region_for(outer, owner))
            self._add_region(region)
            family = [*closures_of(region)]  # the region and the nested defs walked with it
            # Helpers called from a region see the same tensors.
            for call in (call for member in family for call in member.calls):
                target = None
                if isinstance(call.func, cst.Name):
                    # A closure of this function is analysed with it (its parameters are what the region
                    # passes, `_closure_params`); a sibling method's closure of the same name is not it.
                    target = functions.get(call.func.value) if all(
                        call.func.value not in member.nested for member in family) else None
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
                for call in (call for member in family for call in member.calls):
                    for arg in call.args:
                        target = functions.get(arg.value.value) if isinstance(arg.value, cst.Name) else None
                        if target is not None and target not in seen:
                            queue.append((target, "helper", closure_owner.get(target)))
        self._add_region(Region(node=self.module, kind="module"))
        self._learn_parameters()

    def _dataset_functions(self) -> list[cst.FunctionDef]:
        """This file's functions a tf.data pipeline traces (``ds.map(standardize)``, ``ops.DATASET_FUNCTIONS``), in a
        file that builds one (a call in ``tf.data``): graph functions, as if decorated with ``@tf.function``."""
        calls = self.all_calls
        if not self.functions or not any((self.resolve(c.func) or "").startswith(ops.DATASET_NAMESPACE) for c in calls):
            return []
        found = []
        for call in calls:
            where = ops.DATASET_FUNCTIONS.get(call.func.attr.value) if isinstance(call.func, cst.Attribute) else None
            if where is None:
                continue
            position, keyword = where
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            given = [a.value for a in call.args if a.keyword is not None and a.keyword.value == keyword]
            value = given[0] if given else positional[position] if len(positional) > position else None
            target = self.functions.get(value.value) if isinstance(value, cst.Name) else None
            if target is not None and target not in found:
                found.append(target)
        return found

    def _cross_file_seeds(self, seeds: list, inherits: dict[cst.FunctionDef, bool]) -> dict[cst.FunctionDef, frozenset[str]]:
        """Cross-file seeds (``mpfix.project.crosscalls``): a module function another file calls from float16
        code (a Keras layer's ``call``, a model's train step) is a helper, as if called in this file; one some
        caller hands a Keras layer/model instance is a region whose other parameters its callers decide."""
        layer_params: dict[cst.FunctionDef, frozenset[str]] = {}
        for call in getattr(self, "cross_calls", ()):
            func = self.functions.get(call.function)
            if func is None:
                continue
            # A parameter handed a Keras instance, or a callable that runs one (``lambda x: net(x)``): calling it
            # gives the model's output.
            handed = call.keras_instances | call.keras_callables
            if handed:
                layer_params[func] = layer_params.get(func, frozenset()) | handed
            if call.float16 or handed:
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
        self._walk(region, register=True)

    def _walk(self, region: Region, register: bool) -> None:
        """One walk of the region (its closures walked with it), then its names' dtypes (theirs after)."""
        _Collector(self, region, register=register).walk(region.node)
        family = list(closures_of(region))
        if any(member.dtype_aware for member in family):  # tests a dtype somewhere: the whole function guards
            for member in family:
                member.dtype_aware = True
        self._compute_env(region)

    def _closure_region(self, func: cst.FunctionDef, outer: Region, register: bool) -> Region | None:
        """The region of a nested def the walk of ``outer`` meets: a scope of its own whose tables read through to
        ``outer``'s, analysed as ``outer`` is (None: it is a region of its own, a seed, walked as that one)."""
        key = func if self._region_by_func.get(outer.node) is outer else ("shadow", func)
        existing = self._region_by_func.get(key)  # type: ignore[call-overload]
        if (func in self._seeded and key is func) or (existing is not None and not (register and existing.kind == "shadow")):
            return None
        child = Region(node=func, kind=outer.kind, in_class=outer.in_class, owner=outer.owner,
                       layer_method=outer.layer_method, layer_params=outer.layer_params, closure=True,
                       augmented=outer.augmented)
        enclose(child, outer)
        self._region_by_func[key] = child  # type: ignore[index]
        if register:
            self.regions.append(child)
        return child

    def region_for(self, func: cst.FunctionDef, owner: cst.ClassDef | None = None) -> Region:
        """The region of ``func``; a *shadow* one (params unknown, nothing registered) if float16 does not reach it."""
        region = self._region_by_func.get(func)
        if region is None:
            region = Region(node=func, kind="shadow", in_class=owner is not None, owner=owner)
            outer = self._closure_of.get(func)
            if outer is not None:  # a closure's free names are the enclosing function's
                enclose(region, self._region_by_func.get(outer) or self.region_for(outer, owner))
            found = self._region_by_func.get(func)
            if found is not None:  # made while the enclosing one was walked
                return found
            self._region_by_func[func] = region
            self._walk(region, register=False)
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
                " ".join([owner.name.value, *(self.code(b.value) for b in owner.bases)])) is not None
        return found

    def _ops_operation(self, owner: cst.ClassDef, depth: int = 0) -> bool:
        """A keras.ops ``Operation`` (or ``Function``) class, directly or through this file's own classes
        (Keras' ``class SegmentSum(SegmentReduction)`` with ``class SegmentReduction(Operation)``)."""
        for base in owner.bases:
            if heuristics.OPS_OPERATION_BASE.search(self.code(base.value)):
                return True
            parent = self.classes.get(base.value.value) if isinstance(base.value, cst.Name) else None
            if parent is not None and parent is not owner and depth < 8 and self._ops_operation(parent, depth + 1):
                return True
        return False

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
            if self._ops_operation(owner):
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
                enclose(region, self._region_by_func.get(outer) or self._shadow(outer, owner))
            found = self._region_by_func.get(key)  # type: ignore[call-overload]
            if found is not None:  # made while the enclosing one was walked
                return found
            self._region_by_func[key] = region  # type: ignore[index]
            self._walk(region, register=False)
        return region


def enclose(region: Region, outer: Region) -> None:
    """``region`` is a function nested in ``outer``'s: a name it does not bind is ``outer``'s (lexical scoping), so
    its tables read through to ``outer``'s (a ``ChainMap`` writes to its own first map)."""
    region.enclosing = outer
    region.assigned = ChainMap({}, outer.assigned)  # type: ignore[assignment]
    region.unpacked = ChainMap({}, outer.unpacked)  # type: ignore[assignment]
    region.iterated = ChainMap({}, outer.iterated)  # type: ignore[assignment]
    region.elements = ChainMap({}, outer.elements)  # type: ignore[assignment]
    region.nested = ChainMap({}, outer.nested)  # type: ignore[assignment]


def closures_of(region: Region):
    """``region`` and the nested defs walked with it, outermost first."""
    yield region
    for child in region.closures:
        yield from closures_of(child)
