"""The dtype of each name in a region: parameters, assignments, closures, and float32 proven by use."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtype_lattice import (
    BITWISE, F16, F32, INT, PY, UNK, Dtype, argument, join_all, spelled_dtype,
)
from mpfix.codemods.analysis.dtype_arguments import ParameterDtypes
from mpfix.codemods.analysis.dtype_regions import ELEMENT, Region, closures_of
from mpfix.codemods.analysis.dtype_tables import own
from mpfix.codemods.facts import heuristics, keras_layers
from mpfix.codemods.facts import ops as specs


class NameDtypes(ParameterDtypes):
    """Mixed into ``DtypeAnalysis``: fills each region's name table (``Region.env``); what callers pass a region's
    parameters is ``ParameterDtypes``' (``dtype_arguments``)."""

    def _signature(self, func: cst.FunctionDef) -> list[Dtype] | None:
        """Dtypes of ``@tf.function(input_signature=[tf.TensorSpec(shape, tf.float32), ...])``: a ``tf.TensorSpec``'s
        dtype (float32 where it names none, its default); anything else is unknown (``tf.TensorSpec.from_tensor(t)``
        has ``t``'s dtype, not float32). The project scan reads the same (``mpfix.project.signatures``)."""
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
                if isinstance(value, cst.Call) and self.resolve(value.func) == "tensorflow.TensorSpec":
                    arg = argument(value, "dtype", 1)
                    dtype = (spelled_dtype(arg.value, self.resolve) or UNK) if arg is not None else F32
                found.append(dtype)
            return found
        return None

    def signature_float32(self, name: str, region: Region) -> bool:
        """``name`` is a parameter that its function's ``@tf.function(input_signature=[...])`` makes float32 (a
        ``tf.TensorSpec`` with ``dtype`` float32, or none: the default), read in that function or a closure of it,
        and never rebound: the traced function gets it converted to the spec, whatever the policy (N22's caller)."""
        while region is not None:
            if any(name in own(table) for table in (region.assigned, region.unpacked, region.iterated)):
                return False
            node = region.node
            if isinstance(node, cst.FunctionDef):
                params = node.params
                names = [p.name.value for p in [*params.posonly_params, *params.params]][
                    1 if self._bound_method(node, region.owner) else 0:]
                if name in names:
                    specs_ = self._signature_specs(node)
                    index = names.index(name)
                    return specs_ is not None and index < len(specs_) and specs_[index]
                if name in {p.name.value for p in params.kwonly_params} or isinstance(params.star_arg, cst.Param) \
                        and params.star_arg.name.value == name:
                    return False
            region = region.enclosing if region.closure else None
        return False

    def _bound_method(self, func: cst.FunctionDef, owner: cst.ClassDef | None) -> bool:
        """``func`` is defined directly in ``owner``'s body and is no ``staticmethod``: its first parameter is the
        instance (or the class), whatever it is called."""
        return owner is not None and any(stmt is func for stmt in owner.body.body) and not any(
            self.resolve(d.decorator) == "staticmethod" or isinstance(d.decorator, cst.Name) and
            d.decorator.value == "staticmethod" for d in func.decorators)

    def _signature_specs(self, func: cst.FunctionDef) -> list[bool] | None:
        """Per element of ``func``'s ``input_signature``: a ``tf.TensorSpec`` that is certainly float32."""
        signature = self._signature(func)
        return None if signature is None else [dtype is F32 for dtype in signature]

    def _float32_predictions(self, region: Region, pname: str) -> bool:
        """``y_pred`` of a model's own ``compute_loss`` is what its ``call`` returns (Keras passes it by that keyword):
        float32 where ``call`` returns float32 whatever its inputs (a ``dtype="float32"`` head, MP205's fix)."""
        node = region.node
        return pname == "y_pred" and isinstance(node, cst.FunctionDef) and node.name.value == "compute_loss" and \
            self.call_returns_float32(region.owner, node)

    def _model_targets(self, region: Region, pname: str) -> bool:
        """``y`` of a Keras model's own ``compute_loss``/``compute_metrics`` (``keras_layers.MODEL_TARGETS``): the
        batch's targets, never autocast (run, Keras 3 ``fit`` on float32 arrays under mixed_float16: ``y`` float32,
        ``y - y_pred`` of a float16 head raises); a ``tf.data`` pipeline keeps its own dtype: not float16 by default."""
        owner, node = region.owner, region.node
        return owner is not None and isinstance(node, cst.FunctionDef) and \
            keras_layers.MODEL_TARGETS.get(node.name.value) == pname and self.is_layer_class(owner)

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
                if region.closure:
                    dtype = region.params.get(pname, UNK)  # what the enclosing function passes (`_closure_params`)
                elif param.default is not None and not isinstance(param.default, cst.Name):
                    dtype = PY
                elif param.annotation is not None and _python_annotation(param.annotation.annotation):
                    dtype = PY
                elif heuristics.PYTHON_PARAMETER.search(pname):
                    dtype = PY
                elif signature is not None:
                    dtype = signature[position] if position < len(signature) else UNK
                elif region.kind in ("shadow", "module-call", "module-helper"):
                    dtype = UNK
                elif region.callers_decide:
                    dtype = region.params.get(pname, UNK)
                elif position < keras_layers.LOSS_INPUT_POSITIONS and self._loss_inputs_float32(region):
                    # Keras 3 converts a loss's y_true/y_pred to float32 before it runs (C24); a bare call
                    # of this file passing float16 is what it sees then (learnt below).
                    dtype = region.params.get(pname, F32)
                elif position < keras_layers.LOSS_INPUT_POSITIONS and self._loss_inputs_passed(region):
                    region.caller_params.add(pname)
                    # tf_keras: the predictions its callers pass (float16 only without a float32 head): a
                    # caller of this file decides (learnt below), else `self.predictions` (unknown, or the
                    # condition a rule asks about).
                    dtype = region.params.get(pname)
                    if dtype is None:
                        dtype = self.predictions
                        self.assumed_predictions = True
                elif position >= keras_layers.LOSS_INPUT_POSITIONS and region.kind == "loss" and \
                        self._keras_loss_signature(region.node):
                    # A loss's own options (`Loss.__call__`'s `sample_weight=None`, `axis`, `smooth`): what its
                    # callers pass (compile passes none).
                    region.caller_params.add(pname)
                    dtype = region.params.get(pname, UNK)
                elif layer_call and not autocast:
                    dtype = UNK  # autocast=False / preprocessing layers keep their inputs' dtype
                elif layer_call and self.float32_layer(region.owner):
                    dtype = F32  # a float32 layer casts its (first, on tf_keras) inputs to float32
                    if self.keras == 2 and position > 0:
                        dtype = UNK
                elif layer_call and self.keras == 2 and position > 0:
                    # tf_keras autocasts only the first argument of call: the others are what callers pass.
                    dtype = region.params.get(pname, UNK)
                elif self._model_targets(region, pname):
                    dtype = UNK  # the targets as the data gives them (float32 from fit's arrays, a pipeline's own)
                else:
                    dtype = region.params.get(pname, F16)
                    if dtype is F16 and self._float32_predictions(region, pname):
                        dtype = F32
                region.env[pname] = dtype
                position += 1
            for pname in self._used_as_indices(region):
                if region.env.get(pname) is F16:
                    # Keras autocasts floating inputs only: ids stay int (gather/one_hot take integer indices).
                    region.env[pname] = INT
            for pname in self._assigned_variables(region):
                if region.env.get(pname) is F16:
                    # A variable: float32 under a mixed policy, like `v.assign(x)`; inside a layer's call an
                    # autocast one reads float16 (C39: tfm gaussian_process.py), so there its callers decide.
                    region.env[pname] = UNK if region.layer_method else F32
        region.param_dtypes = dict(region.env)
        self._assign_dtypes(region)
        self._closure_params(region)  # the closures read this region's names, and this region their returns
        seen = dict(region.env)
        if region.nested:
            # A second pass (as when closures' parameters were this table's): a name whose value reads it back
            # (`mean = smart_cond(training, lambda: mean, ...)`) settles on what the first pass found.
            region.memo.clear()
            self._assign_dtypes(region)
        if not region.layer_method and region.kind not in ("module", "shadow"):
            self._float32_by_use(region)
        if region.env != seen:
            self._closure_params(region)

    def flow_read(self, node: cst.Name, region: Region, found: Dtype, depth: int) -> Dtype:
        """``node`` read where it stands (``found``: its joined entry): the assignments that reach it (``dtype_flow``)
        for a name the table cannot say (unknown) or says from a name only flow decides (``flow_names``)."""
        if found is not UNK and node.value not in self.flow_names(region):
            return found
        return self.reaching_dtype(node, region, depth) or found

    def flow_names(self, region: Region) -> frozenset[str]:
        """Names of ``region`` read at their use (``dtype_flow.reaching_dtype``) though the joined table knows them:
        those whose joined dtype rests on a name only flow decides. ``mu = y_pred``; ``mu = ops.cast(mu,
        "float32")``; ``z = (y - mu) / s``: the table joins mu's two values (unknown), so z's entry was computed
        from an unknown mu (float16 with y); at z's use its reaching value reads mu where it stands (float32).

        Seeds: a name the region binds more than once (or a parameter it rebinds) whose joined dtype is unknown;
        then every name a value of which reads a seed or such a name. Names made float32 by their use
        (``_float32_by_use``) keep that. Where flow cannot say (a loop, a branch that disagrees) the entry stays."""
        cache = self.__dict__.setdefault("_flow_names", {})
        found = cache.get(id(region))
        if found is not None and found[0] is region:
            return found[1]
        assigned, env = own(region.assigned), region.env
        names: set[str] = {name for name, values in assigned.items() if env.get(name) is UNK and
                           (len(values) > 1 or name in region.param_dtypes)}
        if names:
            reads: dict[str, set[str]] = {}
            for name, values in assigned.items():
                sources = [v for v in values if v is not ELEMENT] + [s for s, _ in region.elements.get(name, ())]
                reads[name] = {n.value for value in sources for n in walk(value) if type(n) is cst.Name} - {name}
            marked = self.__dict__.get("_marked_by_use", {}).get(id(region), (None, set()))
            kept = marked[1] if marked[0] is region else set()
            grown = True
            while grown:
                before = len(names)
                names |= {name for name, read in reads.items() if name not in kept and read & names}
                grown = len(names) > before
        cache[id(region)] = (region, frozenset(names))
        return frozenset(names)

    def _used_as_indices(self, region: Region) -> set[str]:
        """Names the region uses as indices (``tf.gather(self.embeddings, ids)``, ``tf.one_hot(ids, n)``),
        directly or through shape ops and subscripts (``flat = tf.reshape(ids, [-1])``)."""
        found: set[str] = set()
        for call in region.calls:
            spec = specs.lookup(self.resolve(call.func))
            if spec is None or not spec.index_args:
                continue
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            stack = [positional[i] for i in spec.index_args if i < len(positional)]
            while stack:
                node = stack.pop()
                if isinstance(node, cst.Subscript):
                    stack.append(node.value)
                elif isinstance(node, cst.Call):
                    inner = specs.lookup(self.resolve(node.func))
                    if inner is not None and inner.range is specs.Range.FOLLOWS and not inner.is_cast and node.args:
                        stack.append(node.args[0].value)
                elif isinstance(node, cst.Name) and node.value not in found and len(found) < 50:
                    found.add(node.value)
                    stack.extend(v for v in region.assigned.get(node.value, []) if not isinstance(v, cst.Name)
                                 or not v.value.startswith("__"))
        return found

    def _assigned_variables(self, region: Region) -> set[str]:
        """Names the region assigns to as variables (``variable.assign_sub(delta)``, ``tf.compat.v1.assign(v, x)``)."""
        found: set[str] = set()
        for call in region.calls:
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in _ASSIGNS and isinstance(func.value, cst.Name):
                found.add(func.value.value)
            elif call.args and isinstance(call.args[0].value, cst.Name) and \
                    (specs.op_name(self.resolve(func)) or "").rsplit(".", 1)[-1] in _ASSIGNS:
                found.add(call.args[0].value.value)
        return found

    def _closure_params(self, region: Region) -> None:
        """Parameters of the nested defs walked with the region (``Region.closures``): the join of what the calls
        of the region and of its closures pass them; then the closures' own names."""
        if not region.closures:
            return
        sites = [(call, member) for member in closures_of(region) for call in member.calls]
        for child in region.closures:
            func = child.node
            calls = [(c, m) for c, m in sites if isinstance(c.func, cst.Name) and c.func.value == func.name.value]
            names = [p.name.value for p in [*func.params.posonly_params, *func.params.params]]
            child.params = {}
            for i, pname in enumerate(names):
                passed = set()
                for call, member in calls:
                    arg = argument(call, pname, i)
                    passed.add(self.dtype(arg.value, member) if arg is not None else UNK)
                child.params[pname] = join_all(passed) if passed and UNK not in passed else UNK
            self._compute_env(child)

    def _assign_dtypes(self, region: Region, fixed: frozenset[str] | set[str] = frozenset()) -> None:
        for name, values in own(region.assigned).items():  # a closure's own names (the enclosing ones are that region's)
            if name in fixed:
                continue
            region.env.setdefault(name, UNK)
            # `x op= v` keeps x's dtype (or raises): augmented values only count where nothing else
            # says what x is.
            plain = [v for v in values if id(v) not in region.augmented]
            if plain:
                dtypes = {d for value in plain for d in self.value_dtypes(name, value, region)}
            elif name in region.param_dtypes:
                dtypes = {region.param_dtypes[name]}
            else:
                dtypes = {d for value in values for d in self.value_dtypes(name, value, region)}
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
            return [_one(self.value_dtypes(name, value, region)) for value in values]

        as_f16, as_unknown = evaluated(F16), evaluated(UNK)
        independent = {a for a, b in zip(as_f16, as_unknown) if a is b}
        result = UNK
        if independent and UNK not in independent and not (F16 in independent and any(d.wide for d in independent)):
            guess = join_all(independent)
            if all(d is guess for d in evaluated(guess)):
                result = guess
        elif not independent and region.param_dtypes.get(name, UNK).floating_tensor:
            # `y_pred = ops.convert_to_tensor(y_pred)` … `y_true, y_pred = squeeze_or_expand_to_same_rank(y_true,
            # y_pred)`: every value follows the parameter, which keeps the dtype it came in with.
            guess = region.param_dtypes[name]
            if all(d is guess for d in evaluated(guess)):
                result = guess
        region.env[name] = result
        region.memo.clear()

    def value_dtypes(self, name: str, value: cst.BaseExpression, region: Region) -> set[Dtype]:
        """The dtypes ``value`` gives ``name``: an ``ELEMENT`` is every tuple unpacking that binds the name (each
        element by its source and index, unknown where nobody indexes it), and every ``for`` loop over a structure."""
        if value is not ELEMENT:
            return {self.dtype(value, region)}
        found = {UNK if index is None else self.element_dtype(source, index, region)
                 for source, index in region.elements.get(name, ())}
        if name in region.iterated:
            found.add(self._iterated_dtype(name, region))
        return found or {UNK}

    def _iterated_dtype(self, name: str, region: Region) -> Dtype:
        """``for x in inputs[1:]``: an element of a floating tensor, or of a structure of them (a merge layer's
        autocast inputs), has its dtype. Only a structure the region holds (a name, attribute or slice of one): a
        call's result (``for v in self._freeze_vars()``) is whatever the call returns, often variables (mp2's
        19:01 MP203 FP); except an op whose elements the op table knows (``for t in tf.split(qkv, 3, -1)``)."""
        found = {self.dtype(source, region) if not isinstance(source, cst.Call) else
                 self.element_dtype(source, 0, region) for source in region.iterated.get(name, ())
                 if isinstance(source, (cst.Name, cst.Attribute, cst.Subscript)) or
                 (isinstance(source, cst.Call) and getattr(specs.lookup(self.resolve(source.func)), "elements",
                                                           None) is specs.Elements.SAME)}
        return found.pop() if len(found) == 1 and next(iter(found)) in (F16, F32) else UNK

    def _float32_by_use(self, region: Region) -> None:
        """Tensors that meet an explicit float32 tensor in arithmetic are float32 themselves.

        TensorFlow never promotes, so outside a layer's ``call`` (where such a mix is MP206's
        bug) code that runs at all proves the other operand float32: ``neg_log_iou * mask_``
        with ``mask_ = tf.cast(mask, tf.float32)`` makes ``iou`` — and the box areas it is
        computed from — float32, and their ``1e-8`` is not a float16 epsilon. Not float16 of certain
        provenance (``dtype_outputs``: the output of a model or layer this file builds): there the mix is the
        bug (MP206), not evidence.
        """
        marked: set[str] = set()
        for _ in range(3):
            before = len(marked)
            for binop in region.binops:
                if isinstance(binop.operator, (*BITWISE, cst.LeftShift, cst.RightShift)):
                    continue
                left, right = self.dtype(binop.left, region), self.dtype(binop.right, region)
                if left.wide and right is F16 and self.model_output(binop.right, region) is None:
                    self._mark_float32(binop.right, region, marked, 0)
                elif right.wide and left is F16 and self.model_output(binop.left, region) is None:
                    self._mark_float32(binop.left, region, marked, 0)
            if len(marked) == before:
                break
            self._assign_dtypes(region, fixed=marked)
        if marked:
            self.__dict__.setdefault("_marked_by_use", {})[id(region)] = (region, marked)

    def _mark_float32(self, node: cst.BaseExpression, region: Region, marked: set[str], depth: int) -> None:
        if depth > 12:
            return
        deeper = depth + 1
        if isinstance(node, cst.Name):
            if node.value in marked or node.value in region.passed_float16 or region.env.get(node.value) is not F16:
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
            spec = specs.lookup(resolved)
            # A float32 result of an elementwise op of a namespace that refuses mixed inputs (TensorFlow, tf_keras'
            # backend; keras.ops promote) proves its tensor arguments float32.
            if spec is None or not spec.elementwise or not specs.refuses_mixed(resolved):
                return
            for arg in node.args:
                if arg.keyword is None and not arg.star:
                    self._mark_float32(arg.value, region, marked, deeper)


_ASSIGNS = frozenset({"assign", "assign_add", "assign_sub"})


def _python_annotation(node: cst.BaseExpression) -> bool:
    """``int``/``float``/``bool``/``str``: the annotation's code is one of them exactly (a bare name, unparenthesized;
    read from the node, not generated)."""
    return type(node) is cst.Name and not node.lpar and node.value in ("int", "float", "bool", "str")


def _one(dtypes: set[Dtype]) -> Dtype:
    """One dtype for a value that binds several (an ``ELEMENT`` of unpackings that disagree: float16 and float32)."""
    return UNK if F16 in dtypes and any(d.wide for d in dtypes) else join_all(dtypes)
