"""What a region's callers pass its parameters: the file's call sites, other files' float16 callers
(``ProjectFileFacts.cross_calls``), a tf_keras layer's later ``call`` arguments, and a Keras loss's inputs.

``NameDtypes`` (``dtype_env``) reads what is learnt here when it types a region's parameters.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtype_partials import PartialCalls
from mpfix.codemods.analysis.dtype_lattice import (
    BOOL, F16, F32, INT, PY, UNK, Dtype, argument, join_all, spelled_dtype,
)
from mpfix.codemods.analysis.dtype_regions import Region, RegionKind, _Collector, enclose
from mpfix.codemods.analysis.dtype_syntax import blocks, walk_calls
from mpfix.codemods.analysis.gradient_syntax import _is_tape
from mpfix.codemods.analysis.loss_calls import compiled_loss_targets
from mpfix.codemods.facts import keras_layers
from mpfix.codemods.facts import ops as specs


class ParameterDtypes(PartialCalls):
    """Mixed into ``DtypeAnalysis`` (through ``NameDtypes``): parameters learnt from what callers pass."""

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
        taped = self._tape_blocks()
        for call in self.all_calls:
            target = None
            if isinstance(call.func, cst.Name):
                target = self.functions.get(call.func.value)
            elif isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and \
                    call.func.value.value == "self":
                name = call.func.attr.value
                target = next((m[name] for m in self.methods.values() if name in m), None)
            caller = taped.get(id(call)) or self.region_of.get(call)
            if target is None and caller is not None and caller.node in self._tape_withs:
                target = self._instance_method(call, caller)  # `gan.d_loss(...)` with `gan = GAN()`
            if target is None and caller is not None:
                # `self.loss.get('class_loss')(y, outputs)`: the file's Loss classes that key may reach (mp2, turn 6).
                for loss_call in compiled_loss_targets(self, call, caller.assigned):
                    if loss_call in by_function:
                        self._record_call(loss_call, call, caller, seen, spellings)
            elif by_function.get(target) is not None:
                self._record_call(target, call, caller, seen, spellings)
        for target, pairs, call, caller in self._closure_sites():  # body(a, b), tf.while_loop(cond, body, [a, b])
            by_function[target] = self._region_by_func[target]
            self._record_pairs(target, pairs, call, caller, seen, spellings)
        for target, pairs, call, caller in self.partial_records():  # functools.partial(f, w=self.w), its calls
            if target in by_function:
                self._record_pairs(target, pairs, call, caller, seen, spellings)
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
            # Every caller passes a Python number (`self._assign_moving_average(var, mean, 0.99)`), a bool or an int
            # (tf_keras BN: `self._moments(..., keep_dims=keep_dims)` with `keep_dims = ... is not None or ...`):
            # no floating tensor, whatever a helper's parameter is taken as by default (float16).
            learnt.update({name: join_all(ds) for name, ds in dtypes.items() if ds and ds <= _NOT_FLOATING
                           and region.env.get(name) is F16})
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

    def _tape_blocks(self) -> dict[int, Region]:
        """The calls of each ``with tf.GradientTape()`` block outside every float16 region (module-level code, a
        ``main()`` loop), by id: the block is float16 compute under a mixed policy whatever scope it sits in, so
        it is a training-step region of its own (``Region.node`` the ``With``) whose tables read through to its
        scope's (the module's, or the function's shadow region): what it passes is what a train step passes."""
        found = getattr(self, "_tape_calls", None)
        if found is not None:
            return found
        found = self._tape_calls = {}
        self._tape_withs: set[cst.CSTNode] = set()
        todo: list[tuple[list, cst.FunctionDef | None, cst.ClassDef | None]] = [(self.module.body, None, None)]
        while todo:
            body, scope, owner = todo.pop()
            for stmt in body:
                if isinstance(stmt, cst.ClassDef):
                    todo.extend((m.body.body, m, stmt) for m in stmt.body.body
                                if isinstance(m, cst.FunctionDef) and isinstance(m.body, cst.IndentedBlock))
                    continue
                if isinstance(stmt, cst.FunctionDef):
                    if isinstance(stmt.body, cst.IndentedBlock):
                        todo.append((stmt.body.body, stmt, owner if scope is not None else None))
                    continue
                if isinstance(stmt, cst.With) and any(isinstance(item.item, cst.Call) and
                                                      _is_tape(self.resolve, item.item.func) for item in stmt.items):
                    outer = self._tape_scope(scope, owner)
                    if outer is not None:
                        tape = Region(node=stmt, kind=RegionKind.TRAIN_STEP, in_class=outer.in_class, owner=outer.owner)
                        enclose(tape, outer)
                        _Collector(self, tape, register=False).walk(stmt)
                        self._compute_env(tape)
                        self._tape_withs.add(stmt)
                        found.update((id(call), tape) for call in walk_calls(stmt.body))
                        continue
                todo.extend((block, scope, owner) for block in blocks(stmt))
        return found

    def _tape_scope(self, scope: cst.FunctionDef | None, owner: cst.ClassDef | None) -> Region | None:
        """The region whose names a tape block in ``scope`` reads: the module's, or a function's that float16 does
        not reach (a shadow); None inside a float16 region (its own walk types the block)."""
        if scope is None:
            return next((r for r in self.regions if r.kind == "module"), None)
        region = self._region_by_func.get(scope)
        if region is not None:
            return region if region.kind == "shadow" else None
        return self.region_for(scope, owner)

    def _instance_method(self, call: cst.Call, caller: Region) -> cst.FunctionDef | None:
        """``obj.method(...)`` where ``obj`` is bound once, to an instance of a class of this file (``gan = GAN()``)."""
        if not isinstance(call.func, cst.Attribute) or not isinstance(call.func.value, cst.Name):
            return None
        values = caller.assigned.get(call.func.value.value) or self.module_values.get(call.func.value.value, [])
        if len(values) != 1 or not isinstance(values[0], cst.Call) or not isinstance(values[0].func, cst.Name):
            return None
        cls = self.classes.get(values[0].func.value)
        return self.methods.get(cls, {}).get(call.func.attr.value) if cls is not None else None

    def _closure_sites(self):
        """The call sites of a closure every reference of which (in the function that defines it) is a call,
        ``body(a, b)``, or the body of a loop with a list of loop variables, ``tf.while_loop(cond, body, [a, b])``
        (``ops.LOOPS``: the body runs first on them): research DELF's ``_ProcessSingleScale``, called once and
        then looped, both with float32 accumulators. (target, [(parameter, value)], call, caller region)."""
        found = []
        for caller in self.regions:
            if not isinstance(caller.node, cst.FunctionDef) or not caller.nested:
                continue
            names = None
            for name, target in caller.nested.items():
                if target not in self._region_by_func or target.params.star_arg is not cst.MaybeSentinel.DEFAULT:
                    continue
                if names is None:
                    names = [n for n in walk(caller.node.body) if isinstance(n, cst.Name)]
                uses = [n for n in names if n.value == name and n is not target.name]
                params = [p.name.value for p in [*target.params.posonly_params, *target.params.params]]
                sites = [self._closure_site(use, params, caller) for use in uses]
                if uses and all(site is not None for site in sites):
                    found += [(target, pairs, call, caller) for pairs, call in sites]
        return found

    def _closure_site(self, use: cst.Name, params: list[str], caller: Region):
        """(pairs, call) where ``use`` is called (``use(a, b)``) or is a loop's body (``while_loop(c, use, [a, b])``)."""
        for call in caller.calls:
            if call.func is use and not any(a.star for a in call.args):
                if any(a.keyword is not None for a in call.args) or len(call.args) > len(params):
                    return None
                return [(p, a.value) for p, a in zip(params, call.args)], call
            where = specs.LOOPS.get(self.resolve(call.func) or "") if call.args else None
            body = argument(call, where[0][1], where[0][0]) if where is not None else None
            if body is not None and body.value is use:
                loop_vars = argument(call, where[1][1], where[1][0])
                elements = loop_vars.value.elements if loop_vars is not None and \
                    isinstance(loop_vars.value, (cst.List, cst.Tuple)) else None
                if elements is None or len(elements) != len(params) or \
                        any(isinstance(e, cst.StarredElement) for e in elements):
                    return None
                return [(p, e.value) for p, e in zip(params, elements)], call
        return None

    def _record_call(self, target: cst.FunctionDef, call: cst.Call, caller: Region | None,
                     seen: dict[cst.FunctionDef, dict[str, set[Dtype]]],
                     spellings: dict[cst.FunctionDef, dict[str, set[Dtype]]]) -> None:
        """What ``call`` passes to each parameter of ``target`` (its dtype, and a ``dtype`` argument's spelling)."""
        names = [p.name.value for p in [*target.params.posonly_params, *target.params.params]]
        if names and names[0] in ("self", "cls"):
            names = names[1:]
        pairs = []
        for i, arg in enumerate(call.args):
            if arg.star:
                break
            pname = arg.keyword.value if arg.keyword is not None else (names[i] if i < len(names) else None)
            if pname is not None:
                pairs.append((pname, arg.value))
        self._record_pairs(target, pairs, call, caller, seen, spellings)

    def _record_pairs(self, target: cst.FunctionDef, pairs: list[tuple[str, cst.BaseExpression]], call: cst.Call,
                      caller: Region | None, seen: dict[cst.FunctionDef, dict[str, set[Dtype]]],
                      spellings: dict[cst.FunctionDef, dict[str, set[Dtype]]]) -> None:
        self.note_site(target, pairs, call, caller)
        dtypes = seen.setdefault(target, {})
        for pname, value in pairs:
            if caller is None or caller.kind == "module":
                dtype = UNK
            else:
                dtype = self.bound_dtype(value, caller) if caller.kind == "shadow" else self.dtype_at(value, call, caller)
            dtypes.setdefault(pname, set()).add(dtype)
            if pname in _DTYPE_PARAMETERS:  # `reduce_weighted_values(..., dtype=self.dtype)`
                spelled = self.dtype_of_spelling(value, caller) if caller is not None else UNK
                spellings.setdefault(target, {}).setdefault(pname, set()).add(spelled)

    def _cross_file_arguments(self, by_function: dict[cst.FunctionDef, Region],
                              seen: dict[cst.FunctionDef, dict[str, set[Dtype]]],
                              spellings: dict[cst.FunctionDef, dict[str, set[Dtype]]]) -> None:
        """What other files' float16 code passes a function of this file (``ProjectFileFacts.cross_calls``): the
        caller's float16 activations, a float32 cast, a number, or a value the scan cannot judge; a ``dtype``
        parameter a caller leaves out is its default (``get_padding_bias(x, dtype=tf.float32)``). A call from
        anywhere that hands the function a Keras instance (or a callable running one) is one of the callers that
        decide its other parameters too (research DELF's export_local_model.py: a float32 ``input_signature``
        parameter and a lambda running the Delf model, N22)."""
        for call in getattr(self, "cross_calls", ()):
            target = self.functions.get(call.function)
            if target not in by_function or not (call.float16 or call.keras_instances or call.keras_callables):
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
            built = {self.code(v.func) if isinstance(v, cst.Call) and
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


_DTYPE_PARAMETERS = frozenset({"dtype", "compute_dtype"})  # parameters that name a dtype
_NOT_FLOATING = frozenset({PY, BOOL, INT})  # what callers pass that is never a floating tensor
