"""The dtype of each name in a region: parameters, assignments, closures, and float32 proven by use."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.dtype_lattice import (
    BITWISE, F16, F32, INT, PY, UNK, Dtype, argument, join_all, spelled_dtype,
)
from mpfix.codemods.analysis.dtype_regions import ELEMENT, Region, closures_of
from mpfix.codemods.analysis.dtype_tables import own
from mpfix.codemods.analysis.loss_calls import compiled_loss_targets
from mpfix.codemods.facts import heuristics, keras_layers
from mpfix.codemods.facts import ops as specs


class NameDtypes:
    """Mixed into ``DtypeAnalysis``: fills each region's name table (``Region.env``)."""

    def _learn_parameters(self, rounds: int = 3) -> None:
        """Parameters every call site in the file passes the same known dtype: that dtype.

        tf-models tasks cast the model's outputs with ``tf.nest.map_structure(lambda x:
        tf.cast(x, tf.float32), outputs)`` before ``self.build_losses(model_outputs=outputs)``;
        without this, every loss term in ``build_losses`` looked float16. A call site outside
        the regions (whose arguments we cannot judge) keeps the parameter as it was.
        """
        by_function = {r.node: r for r in self.regions if isinstance(r.node, cst.FunctionDef) and not r.closure}
        if not by_function:
            return
        self._learn_layer_arguments(by_function)
        seen: dict[cst.FunctionDef, dict[str, set[Dtype]]] = {}
        spellings: dict[cst.FunctionDef, dict[str, set[Dtype]]] = {}
        for call in self.all_calls:
            target = None
            if isinstance(call.func, cst.Name):
                target = self.functions.get(call.func.value)
            elif isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and \
                    call.func.value.value == "self":
                name = call.func.attr.value
                target = next((m[name] for m in self.methods.values() if name in m), None)
            caller = self.region_of.get(call)
            if target is None and caller is not None:
                # `self.loss.get('class_loss')(y, outputs)`: the file's Loss classes that key may reach (mp2, turn 6).
                for loss_call in compiled_loss_targets(self, call, caller.assigned):
                    if loss_call in by_function:
                        self._record_call(loss_call, call, caller, seen, spellings)
            elif by_function.get(target) is not None:
                self._record_call(target, call, caller, seen, spellings)
        self._cross_file_arguments(by_function, seen, spellings)
        passed_on = False
        respelled = []
        for target, names in spellings.items():
            region = by_function[target]
            learnt = {name: next(iter(ds)) for name, ds in names.items() if len(ds) == 1 and UNK not in ds
                      and region.spelled.get(name) is not next(iter(ds))}
            # A spelling learnt in an earlier round that the callers no longer agree on is forgotten.
            stale = [name for name, ds in names.items() if name in region.spelled and (len(ds) != 1 or UNK in ds)]
            for name in stale:
                del region.spelled[name]
            if learnt or stale:
                region.spelled.update(learnt)
                region.memo.clear()
                respelled.append(region)
        if respelled:
            # Recomputed once every spelling is learnt, with the regions that call them: a caller computed before
            # (`padding = get_padding(x, dtype)`) read the callee's stale return.
            self._returns.clear()
            nodes = {region.node for region in respelled}
            callers = [r for r in by_function.values() if r not in respelled and any(
                (found := self._same_file_function(call, r)) is not None and found[0] in nodes for call in r.calls)]
            for region in [*respelled, *callers]:
                region.memo.clear()
                self._compute_env(region)
            passed_on = True  # what the regions compute with it, they pass on (once more)
        for target, dtypes in seen.items():
            region = by_function[target]
            # Every caller passes float32 (Python numbers too: they become tensors of what they meet, and a
            # caller passing a float32 tensor says what that is: `momentum` as `self.momentum` or a tensor).
            learnt = {name: F32 for name, ds in dtypes.items() if ds and any(d.wide for d in ds)
                      and all(d.wide or d is PY for d in ds) and (region.env.get(name) is F16 or
                                                                 name in self._assigned_variables(region))}
            # Every caller passes a Python number (`self._assign_moving_average(var, mean, 0.99)`).
            learnt.update({name: PY for name, ds in dtypes.items() if ds == {PY} and region.env.get(name) is F16})
            if region.kind == "helper":
                # A helper's parameter is float16 because float16 code calls it; when no caller in the file
                # passes float16 (only unknown values, float32 or numbers), it is as unknown as they are.
                learnt.update({name: UNK for name, ds in dtypes.items() if UNK in ds and F16 not in ds
                               and region.env.get(name) is F16 and name not in learnt})
            if self._loss_inputs_float32(region):
                # A Keras 3 loss called bare in this file on float16 tensors computes in float16 (C24).
                learnt.update({name: F16 for name, ds in dtypes.items() if F16 in ds and region.param_dtypes.get(name) is F32})
            if self._loss_inputs_passed(region):
                # tf_keras: a bare call of this file on float16 predictions (a custom loop) runs it in float16.
                learnt.update({name: F16 for name, ds in dtypes.items() if F16 in ds and
                               region.param_dtypes.get(name) is self.predictions and name in region.caller_params})
            passed = {name for name, ds in dtypes.items() if ds == {F16} and region.param_dtypes.get(name) is F16
                      and region.env.get(name) is F32} - region.passed_float16
            stale = {name for name in region.passed_float16 if dtypes.get(name) != {F16}}
            if passed or stale:
                # `reparameterize(mean, log_var)` called with float16 encoder outputs: float32-by-use had made
                # them float32 because they meet `tf.random.normal`'s float32 noise, the very mix that is the bug.
                region.passed_float16 = (region.passed_float16 | passed) - stale
                learnt.update(dict.fromkeys(passed, F16))
                learnt.update({name: region.params.get(name, F16) for name in stale})
                passed_on = True
            if region.callers_decide or region.caller_params:
                decided = {name: next(iter(ds)) for name, ds in dtypes.items() if len(ds) == 1
                           and next(iter(ds)).floating_tensor and region.env.get(name) is UNK}
                learnt.update(decided)
                passed_on = passed_on or bool(decided)
            if learnt:
                # A float32 parameter is passed on as well (a closure's `var` to `_assign_moving_average`).
                passed_on = passed_on or any(d is F32 and region.params.get(n) is not F32 for n, d in learnt.items())
                region.params.update(learnt)
                self._compute_env(region)
        if rounds > 1 and passed_on:
            # What a region learnt it passes on to the helpers it calls (iou_loss -> _iou_per_anchor): once more.
            self._learn_parameters(rounds - 1)

    def _record_call(self, target: cst.FunctionDef, call: cst.Call, caller: Region | None,
                     seen: dict[cst.FunctionDef, dict[str, set[Dtype]]],
                     spellings: dict[cst.FunctionDef, dict[str, set[Dtype]]]) -> None:
        """What ``call`` passes to each parameter of ``target`` (its dtype, and a ``dtype`` argument's spelling)."""
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
            if pname in _DTYPE_PARAMETERS:  # `reduce_weighted_values(..., dtype=self.dtype)`
                spelled = self.dtype_of_spelling(arg.value, caller) if caller is not None else UNK
                spellings.setdefault(target, {}).setdefault(pname, set()).add(spelled)

    def _cross_file_arguments(self, by_function: dict[cst.FunctionDef, Region],
                              seen: dict[cst.FunctionDef, dict[str, set[Dtype]]],
                              spellings: dict[cst.FunctionDef, dict[str, set[Dtype]]]) -> None:
        """What other files' float16 code passes a function of this file (``ProjectFileFacts.cross_calls``): the
        caller's float16 activations, a float32 cast, a number, or a value the scan cannot judge; a ``dtype``
        parameter a caller leaves out is its default (``get_padding_bias(x, dtype=tf.float32)``)."""
        for call in getattr(self, "cross_calls", ()):
            target = self.functions.get(call.function)
            if target not in by_function or not call.float16:
                continue
            dtypes = seen.setdefault(target, {})
            for name in call.tensors | call.float32 | call.numbers | call.unknown:
                dtype = F16 if name in call.tensors else F32 if name in call.float32 else \
                    PY if name in call.numbers else UNK
                dtypes.setdefault(name, set()).add(dtype)
            passed = {name for name, _ in call.args}
            for param in [*target.params.params, *target.params.kwonly_params]:
                if param.name.value in _DTYPE_PARAMETERS and param.default is not None:
                    spelled = UNK if param.name.value in passed else spelled_dtype(param.default, self.resolve) or UNK
                    spellings.setdefault(target, {}).setdefault(param.name.value, set()).add(spelled)

    def _learn_layer_arguments(self, by_function: dict[cst.FunctionDef, Region]) -> None:
        """tf_keras autocasts only the first argument of a layer's ``call``: a later parameter of a layer class of
        this file is float32 when every ``self.<layer>(...)`` call site of the file passes float32 (research
        detr_lib.py: ``self._encoder_stack(inputs, training, pos_encoding)`` with a float32 position encoding,
        C37). Keras 3 converts every floating argument, so there it stays the compute dtype."""
        if self.keras != 2:
            return
        passed: dict[cst.FunctionDef, dict[str, set[Dtype]]] = {}
        for call in self.all_calls:
            func = call.func
            caller = self.region_of.get(call)
            if not isinstance(func, cst.Attribute) or not isinstance(func.value, cst.Name) or \
                    func.value.value != "self" or caller is None or caller.owner is None or caller.kind == "module":
                continue
            # An instance built with its own `dtype=` (tfm gaussian_process.py: `dtype=self.dtype`, a float32 layer)
            # casts its first input unlike the class's `call` region models: nothing is learnt from it.
            built = {self.module.code_for_node(v.func) if isinstance(v, cst.Call) and
                     argument(v, "dtype", None) is None else None
                     for _, v in self.attribute_values(caller.owner, func.attr.value)}
            cls = self.classes.get(next(iter(built)) or "") if len(built) == 1 else None
            target = self.methods.get(cls, {}).get("call") if cls is not None else None
            region = by_function.get(target) if target is not None else None
            if region is None or region.kind != "layer-call" or not self.is_layer_class(cls) or \
                    not self.autocasts(cls):
                continue
            names = [p.name.value for p in [*target.params.posonly_params, *target.params.params]][1:]
            for i, arg in enumerate(call.args):
                if arg.star:
                    break
                pname = arg.keyword.value if arg.keyword is not None else (names[i] if i < len(names) else None)
                if pname is not None and names and pname != names[0]:  # the first argument is autocast
                    passed.setdefault(target, {}).setdefault(pname, set()).add(self.dtype_at(arg.value, call, caller))
        for target, names in passed.items():
            region = by_function[target]
            learnt = {n: F32 for n, ds in names.items() if ds == {F32} and region.env.get(n) is UNK
                      and region.params.get(n) is not F32}
            if learnt:
                region.params.update(learnt)
                self._compute_env(region)

    def _loss_inputs_float32(self, region: Region) -> bool:
        """``region`` is a Keras loss (``fn(y_true, y_pred)``, or ``call`` of a ``Loss`` subclass) whose
        inputs Keras converts to float32 before it runs (``keras_layers.LOSS_INPUTS``: Keras 3 only)."""
        return keras_layers.LOSS_INPUTS.get(self.keras) == "float32" and self._keras_loss(region)

    def _loss_inputs_passed(self, region: Region) -> bool:
        """``region`` is a Keras loss that gets its inputs as its callers pass them (tf_keras: compile hands
        it the model's predictions as they are, float32 behind a float32 head, and casts y_true to them)."""
        return keras_layers.LOSS_INPUTS.get(self.keras) is None and self._keras_loss(region)

    def _keras_loss(self, region: Region) -> bool:
        """A Keras loss: ``fn(y_true, y_pred, *options)`` or a method of a ``Loss`` subclass with that signature."""
        if not isinstance(region.node, cst.FunctionDef) or not self._keras_loss_signature(region.node):
            return False
        return region.owner is None or any(
            (self.resolve(base.value) or "").startswith(keras_layers.LOSS_BASES) for base in region.owner.bases)

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
                if region.closure:
                    dtype = region.params.get(pname, UNK)  # what the enclosing function passes (`_closure_params`)
                elif param.default is not None and not isinstance(param.default, cst.Name):
                    dtype = PY
                elif param.annotation is not None and self.module.code_for_node(param.annotation.annotation) in (
                        "int", "float", "bool", "str"):
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
                else:
                    dtype = region.params.get(pname, F16)
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
        elif not independent and region.param_dtypes.get(name, UNK).floating_tensor:
            # `y_pred = ops.convert_to_tensor(y_pred)` … `y_true, y_pred = squeeze_or_expand_to_same_rank(y_true,
            # y_pred)`: every value follows the parameter, which keeps the dtype it came in with.
            guess = region.param_dtypes[name]
            if all(d is guess for d in evaluated(guess)):
                result = guess
        region.env[name] = result
        region.memo.clear()

    def value_dtype(self, name: str, value: cst.BaseExpression, region: Region) -> Dtype:
        """The dtype ``value`` gives ``name`` (an element of a tuple unpacking by its source)."""
        if value is ELEMENT:
            for source, index in region.unpacked.get(name, ()):
                return self.element_dtype(source, index, region)
            # `for x in inputs[1:]`: an element of a floating tensor, or of a structure of them (a merge layer's
            # autocast inputs), has its dtype.
            # Only a structure the region holds (a name, attribute or slice of one): a call's result (`for v in
            # self._freeze_vars()`) is whatever the call returns, often variables (mp2's 19:01 MP203 FP);
            # except an op whose elements the op table knows (`for t in tf.split(qkv, 3, -1)`: gen, unseen).
            found = {self.dtype(source, region) if not isinstance(source, cst.Call) else
                     self.element_dtype(source, 0, region) for source in region.iterated.get(name, ())
                     if isinstance(source, (cst.Name, cst.Attribute, cst.Subscript)) or
                     (isinstance(source, cst.Call) and getattr(specs.lookup(self.resolve(source.func)), "elements",
                                                               None) is specs.Elements.SAME)}
            return found.pop() if len(found) == 1 and next(iter(found)) in (F16, F32) else UNK
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
                if isinstance(binop.operator, (*BITWISE, cst.LeftShift, cst.RightShift)):
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
            # Only TensorFlow's own ops refuse mixed inputs (keras.ops promote): a float32 result
            # of an elementwise tf op proves its tensor arguments float32.
            if spec is None or not spec.elementwise or not resolved.startswith("tensorflow."):
                return
            for arg in node.args:
                if arg.keyword is None and not arg.star:
                    self._mark_float32(arg.value, region, marked, deeper)


_ASSIGNS = frozenset({"assign", "assign_add", "assign_sub"})
_DTYPE_PARAMETERS = frozenset({"dtype", "compute_dtype"})  # parameters that name a dtype
