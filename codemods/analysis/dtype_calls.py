"""The dtype of a call: TF/Keras ops by the op table (``facts.ops``), layers, models and same-file helpers."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.dtype_lattice import (
    BOOL, CPLX, F16, F32, INT, PY, PYTHON_FUNCS, UNK, Dtype, all_integers, arith, argument, join_all,
)
from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtype_regions import Region
from mpfix.codemods.analysis.dtype_syntax import assignments
from mpfix.codemods.facts import heuristics, keras_layers
from mpfix.codemods.facts import ops as specs
from mpfix.codemods.names import dotted_name


def _keeps_dtype_of(value: cst.BaseExpression, param: str, bound: dict[str, list[cst.BaseExpression]], resolve,
                    depth: int = 0) -> bool:
    """``value`` is ``param`` passed through ops that keep their argument's dtype (the op table's PRESERVES:
    reshape, transpose, squeeze...), through names bound once: ``return tf.transpose(tf.reshape(t, s), p)``."""
    if depth > 12:
        return False
    if isinstance(value, cst.Name):
        if value.value == param:
            return True
        values = bound.get(value.value, [])
        return len(values) == 1 and _keeps_dtype_of(values[0], param, bound, resolve, depth + 1)
    if isinstance(value, cst.Call):
        spec = specs.known(resolve(value.func))
        first = next((a.value for a in value.args if a.keyword is None and not a.star), None)
        return spec is not None and spec.result is specs.Result.PRESERVES and first is not None and \
            _keeps_dtype_of(first, param, bound, resolve, depth + 1)
    return False


_CALLEES = (cst.Call, cst.Attribute, cst.Name)


class CallDtypes:
    """Mixed into ``DtypeAnalysis``: ``_call_dtype``."""

    def _call_dtype(self, node: cst.Call, region: Region, depth: int) -> Dtype:
        # Exact type tests of the callee (LibCST's classes are ABCs: isinstance is a Python call; these have no
        # subclasses): asked of every call the inference types.
        func_type = type(node.func)
        resolved = self.resolve(node.func) or ""
        func_name = dotted_name(node.func) or ""
        if func_type is cst.Name and node.func.value in PYTHON_FUNCS and not resolved:
            if node.func.value == "float" and node.args and isinstance(node.args[0].value, cst.SimpleString):
                return PY
            return PY
        if func_type is cst.Name and node.func.value == "complex" and not resolved:
            return CPLX
        if resolved.startswith(("math.", "numpy.", "random.", "time.")) or func_name.startswith(("np.", "math.")):
            return PY
        if resolved.endswith("backend.floatx") or func_name.endswith("floatx"):
            return PY  # a dtype name; float32 under every mixed policy
        if func_type is cst.Attribute and node.func.attr.value in keras_layers.TAPE_GRADIENT_METHODS and \
                heuristics.TAPE_NAME.search(dotted_name(node.func.value) or ""):
            return F32  # gradients of the float32 variables (LossScaleOptimizer unscales in float32)
        if func_type is cst.Attribute and node.func.attr.value in keras_layers.OPTIMIZER_RESULTS and \
                heuristics.OPTIMIZER_NAME.search(dotted_name(node.func.value) or ""):
            if keras_layers.OPTIMIZER_RESULTS[node.func.attr.value] == "int":
                return INT
            return self.dtype(node.args[0].value, region, depth) if node.args and node.args[0].keyword is None else UNK
        predictions = self.loss_function_predictions(node, region)
        if predictions is not None:
            return self.dtype(predictions, region, depth)  # keras.losses.mse(y, pred): y converted to pred's dtype
        loss_object = self._loss_object(node, region)
        if loss_object:
            if keras_layers.LOSS_OBJECT_COMPUTES_FLOAT32[self.keras]:
                return F32
            pred = argument(node, "y_pred", 1)
            return self.dtype(pred.value, region, depth) if pred is not None else UNK
        if func_type is cst.Attribute and node.func.attr.value in ("assign", "assign_add", "assign_sub"):
            return F32  # a variable's assign returns the variable: float32 (the policy's variable dtype)
        if func_type is cst.Attribute and node.func.attr.value == "astype" and node.args:
            return self.dtype_of_spelling(node.args[0].value, region, depth)
        if func_type is cst.Attribute and node.func.attr.value in ("numpy", "item", "as_list", "get_shape", "tolist",
                                                                              "num_elements"):
            return PY
        position = specs.MAP_STRUCTURE.get(resolved)
        if position is not None and len(node.args) > position and isinstance(node.args[position].value, cst.Lambda):
            # tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), outputs)
            body = node.args[position].value.body
            return self.dtype(body, region, depth) if isinstance(body, cst.Call) else UNK
        branches = specs.BRANCHES.get(resolved)
        if branches is not None:
            found = {self._callable_result(arg.value, region, depth) if arg is not None else UNK
                     for arg in (argument(node, keyword, position) for position, keyword in branches)}
            return UNK if UNK in found else join_all(found)
        if func_type is cst.Attribute and node.func.attr.value in keras_layers.GENERATOR_METHODS and \
                not resolved:
            if keras_layers.GENERATOR_METHODS[node.func.attr.value] == "like":
                if heuristics.RANDOM_GENERATOR.search(dotted_name(node.func.value) or ""):
                    first = argument(node, "inputs", 0)
                    return self.dtype(first.value, region, depth) if first is not None else UNK
            else:
                dtype_arg = argument(node, "dtype", None)
                return self.dtype_of_spelling(dtype_arg.value, region, depth) if dtype_arg is not None else F32
        if func_type is cst.Call and \
                (self.resolve(node.func.func) or "").startswith(keras_layers.INITIALIZER_MODULES):
            dtype_arg = argument(node, "dtype", 1)  # GlorotUniform()(shape, dtype=None): floatx by default
            return self.dtype_of_spelling(dtype_arg.value, region, depth) if dtype_arg is not None else F32
        if keras_layers.is_input(resolved):
            dtype_arg = argument(node, "dtype", None)
            return self.dtype_of_spelling(dtype_arg.value, region, depth) if dtype_arg is not None else F32
        op = specs.op_name(resolved)
        head = func_name.split(".")[0]
        if op is None:
            if head in self.imported and not resolved.startswith("keras."):
                # A helper from another file (transformer_utils.get_padding, box_ops.compute_iou):
                # its result's dtype is decided there.
                return UNK
            if resolved.startswith("keras."):
                if func_type is cst.Call:
                    pass
                else:
                    return UNK  # constructors
            if region.kind in ("module",):
                return self._top_level_call_dtype(node, region, depth)
            if self.own_call_float32(node, region, depth):
                return F32
            # A layer built with a dtype outputs that dtype (`self.norm = LayerNorm(dtype="float32")`).
            if func_type in _CALLEES:
                declared = self.layer_output_dtype(node.func, region)
                if declared is not None:
                    return declared
            callee = self._same_file_function(node, region)
            if callee is not None:
                returned = self.return_dtype(*callee, depth=depth)
                if returned is not UNK and returned is not PY:
                    return returned
                own = self._region_by_func.get(callee[0])
                if own is not None and own is not region and own.kind not in ("shadow", "module") and own.returns \
                        and not own.callers_decide and depth < 20:
                    # A float16 region of this file that returns float32 all the same (`tf.cast(m, dtype)` with the
                    # dtype its callers spell, float32): float32 whatever it is passed.
                    produced = join_all(self.dtype(v, own, depth + 1) for v in own.returns)
                    if produced.wide or (own.closure and produced.floating_tensor):
                        return produced  # a closure's returns: computed on what the function around it passes
                closure = region.nested.get(callee[0].name.value) is callee[0]
                if callee[1] is not None and node.args and not closure:
                    # A method of this class follows its tensor arguments (float32 gradients in, float32 out),
                    # when what it returns is a tensor computed from them (not a shape: `_get_noise_shape`), or
                    # it is a hook subclasses implement (`_merge_function`, `Loss.call`: no return here).
                    joined = join_all({self.dtype(a.value, region, depth) for a in node.args if a.keyword is None})
                    own = self.region_for(*callee)
                    follows = own is not region and (not own.returns or any(
                        self.dtype(v, own, depth + 1).floating_tensor for v in own.returns))
                    return UNK if joined is PY or not follows else joined
                passed = [self.dtype(a.value, region, depth) for a in node.args if a.keyword is None]
                if any(d.floating_tensor for d in passed):
                    # A function of this file whose result follows its arguments: `_masked_maximum(d, mask32)`
                    # outside a layer only runs if `d` is float32 too.
                    folded = passed[0]
                    for d in passed[1:]:
                        folded = arith(folded, d, strict=not region.layer_method)
                    if folded.floating_tensor:
                        return folded
                elif callee[1] is None or closure:
                    return UNK  # a function of this file on values of unknown dtype: as unknown as they are
            if func_type is cst.Name:
                values = self._scoped_values(node.func, region)
                if values and all(isinstance(v, cst.Lambda) for v in values):
                    # `round_to_int = lambda x: tf.cast(tf.round(x), tf.int64)`: no layer, its body's dtype (C: xlnet).
                    return self._callable_result(node.func, region, depth)
            if region.kind == "shadow":
                return UNK
            if func_type is cst.Name and node.func.value in region.param_dtypes and \
                    node.func.value not in region.layer_params and not heuristics.MODEL_CALL_NAME.search(node.func.value):
                # A callable parameter (`distance_metric(embeddings)`): it maps its argument, whose
                # dtype is the best guess of its result's.
                passed = [self.dtype(a.value, region, depth) for a in node.args if a.keyword is None][:2]
                wide = [d for d in passed if d.wide]
                if wide:
                    return wide[0]
            return F16  # a layer, model or helper called on tensors
        return self._op_dtype(node, specs.lookup(resolved) or specs.spec_of(op), resolved, region, depth)

    def own_call_float32(self, node: cst.Call, region: Region, depth: int = 0) -> bool:
        """A model calling itself (``self(x)`` in its train_step, test_step, compute_loss; the receiver by binding: the
        first parameter of a method defined in the class body, not a staticmethod, whatever it is called; a closure
        reads its method's) returns what its ``call`` returns: true where that is float32 whatever its inputs (a
        dtype="float32" head, MP205's fix)."""
        outer = region
        while outer is not None and not (isinstance(outer.node, cst.FunctionDef) and
                                         self._bound_method(outer.node, outer.owner)):
            outer = outer.enclosing
        if outer is None or not outer.node.params.params or not isinstance(node.func, cst.Name) or \
                node.func.value != outer.node.params.params[0].name.value:
            return False
        return self.call_returns_float32(outer.owner, outer.node, depth + 1)

    def call_returns_float32(self, owner: cst.ClassDef | None, caller: cst.FunctionDef, depth: int = 0) -> bool:
        """``owner`` is a Keras layer/model class whose ``call`` (read from another of its methods, ``caller``)
        returns float32 whatever its inputs: what the model hands itself, ``self(x)``, and its own ``compute_loss``
        as ``y_pred``."""
        if owner is None or not self.is_layer_class(owner):
            return False
        own_call = self.methods.get(owner, {}).get("call")
        return own_call is not None and own_call is not caller and self.return_dtype(own_call, owner, depth) is F32

    def _python_int(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> bool:
        """A Python int: ``int(...)``/``len(...)``, or a name every assignment of which is one
        (``last_dim = int(functools.reduce(operator.mul, dims))`` in ``tf.constant([-1, last_dim])``)."""
        if isinstance(node, cst.Integer):
            return True
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("int", "len"):
            return not self.resolve(node.func)
        if isinstance(node, cst.Name) and depth < 4:
            values = region.assigned.get(node.value, [])
            return bool(values) and node.value not in region.param_dtypes and \
                all(self._python_int(v, region, depth + 1) for v in values)
        return False

    def _callable_result(self, node: cst.BaseExpression, region: Region, depth: int) -> Dtype:
        """What calling ``node`` with no arguments returns: a lambda's body, a function or closure of this file,
        a name bound to lambdas (``true_branch = lambda: self.moving_mean``)."""
        if isinstance(node, cst.Lambda):
            return self.dtype(node.body, region, depth)
        if isinstance(node, cst.Name):
            values = self._scoped_values(node, region)
            if values and all(isinstance(v, cst.Lambda) for v in values):
                found = {self.dtype(v.body, region, depth) for v in values}
                return UNK if UNK in found else join_all(found)
            if values:
                return UNK
        if isinstance(node, (cst.Name, cst.Attribute)):
            callee = self._same_file_function(cst.Call(func=node), region)
            if callee is not None:
                return self.return_dtype(*callee, depth=depth)
        return UNK

    def _scoped_values(self, name: cst.Name, region: Region) -> list[cst.BaseExpression]:
        """The values ``name`` is assigned in the innermost function around it (a region's table also holds its
        closures' assignments: ``true_branch`` of two sibling closures are two names)."""
        values = region.assigned.get(name.value, [])
        if len(values) < 2:
            return values
        scope = self._innermost_function(name)
        own = [v for v in values if self._innermost_function(v) is scope]
        return own or values

    def _innermost_function(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return next((n for n in self.ancestors(node) if type(n) is cst.FunctionDef), None)

    def _top_level_call_dtype(self, node: cst.Call, region: Region, depth: int) -> Dtype:
        """A script's top-level call: a functional model's layer call (``Dense(4)(x)``), or a call of one of
        its own functions whose result does not depend on the arguments (``loss = train_step(x, y)``)."""
        if isinstance(node.func, cst.Call):
            return self.built_layer_output(node.func, node, region, depth)
        callee = self._same_file_function(node, region)
        if callee is not None and callee[1] is None:
            returned = self.return_dtype(*callee, depth=depth)
            return UNK if returned is PY else returned
        return UNK

    def built_layer_output(self, built: cst.Call, call: cst.Call, region: Region, depth: int) -> Dtype:
        """What calling the layer ``built`` constructs (``Dense(4)``, a layer class of this file) outputs under
        the policy: its declared dtype, else the compute dtype it autocasts floating inputs to; unknown for
        layers that do not autocast or whose output follows what they wrap."""
        declared = self.layer_output_dtype(built, region)
        if declared is not None:
            return declared
        resolved = self.resolve(built.func) or ""
        if resolved.startswith(("keras.layers.", "keras.src.layers.")):
            name = resolved.rsplit(".", 1)[-1]
            spec = keras_layers.layer(resolved, self.keras)
            if (spec is not None and not spec.autocasts) or ".preprocessing." in resolved or \
                    name in keras_layers.OUTPUT_FOLLOWS_INPUT:
                return UNK
            reads_ids = name in keras_layers.READS_IDS
        else:
            cls = self.classes.get(built.func.value) if isinstance(built.func, cst.Name) else None
            if cls is None or not self.is_layer_class(cls) or not self.autocasts(cls):
                return UNK
            if self.float32_layer(cls):
                return F32
            reads_ids = False
        passed = {self.dtype(a.value, region, depth) for a in call.args if a.keyword is None and not a.star}
        if not reads_ids and passed & {INT, BOOL}:
            return UNK  # autocast leaves integer and bool inputs as they are
        return F16

    def _loss_object(self, node: cst.Call, region: Region) -> bool:
        """``loss_fn(y, pred)`` with ``loss_fn = keras.losses.MeanSquaredError()`` (in the function or at top level)."""
        if not isinstance(node.func, cst.Name):
            return False
        values = region.assigned.get(node.func.value) or self.module_values.get(node.func.value, [])
        return len(values) == 1 and isinstance(values[0], cst.Call) and \
            (self.resolve(values[0].func) or "").startswith("keras.losses.") and \
            (self.resolve(values[0].func) or "").rsplit(".", 1)[-1][:1].isupper()

    def _op_dtype(self, node: cst.Call, spec: specs.OpSpec, resolved: str, region: Region, depth: int) -> Dtype:
        """The dtype of a TF/Keras op's result, by its ``OpSpec``."""
        result = spec.result
        if result is R.CAST:
            dtype_arg = argument(node, "dtype", 1)
            return self.dtype_of_spelling(dtype_arg.value, region, depth) if dtype_arg else UNK
        dtype_arg = argument(node, "dtype", spec.dtype_position)
        if dtype_arg is not None:
            return self.dtype_of_spelling(dtype_arg.value, region, depth)
        if result is R.FLOAT32:
            return F32
        if result is R.VALUE:
            if not node.args:
                return F32
            value = node.args[-1].value if spec.short == "fill" else node.args[0].value
            if isinstance(value, (cst.List, cst.Tuple)):
                # tf.constant([-1, last_dim]): int32 unless a float is among the values.
                found = {self.dtype(e.value, region, depth) for e in value.elements}
                if any(isinstance(e.value, cst.Float) for e in value.elements) or any(d.wide for d in found):
                    return F32
                return INT if all_integers(value) or found <= {INT} or \
                    all(all_integers(e.value) or self.dtype(e.value, region, depth) is INT or
                        self._python_int(e.value, region) for e in value.elements) else UNK
            first = self.dtype(value, region, depth)
            if first is PY:
                return INT if isinstance(value, cst.Integer) or all_integers(value) else F32
            return first
        if result is R.RANGE:
            args = [a.value for a in node.args if a.keyword is None]
            if any(isinstance(a, cst.Float) for a in args):
                return F32
            wide = [d for d in {self.dtype(a, region, depth) for a in args} if d.floating_tensor]
            return wide[0] if len(wide) == 1 else INT
        if result in _FIXED:
            return _FIXED[result]
        if result is R.LIKE:
            return self.dtype(node.args[0].value, region, depth) if node.args else UNK
        if spec.name.startswith(("dtypes.", "float", "int")) or spec.short in ("float32", "float16") or \
                spec.short in specs.SPELLING_OPS:
            return PY  # tf.dtypes.float32, tf.float16: a dtype name
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        if len(positional) < len(node.args):
            # tf.matmul(a=inputs, b=self.kernel), ops.multiply(x1=..., x2=...): TensorFlow's and Keras' names of
            # the tensor operands, in their positions.
            for arg in node.args:
                index = specs.TENSOR_KEYWORDS.get(arg.keyword.value) if arg.keyword is not None else None
                if index is not None and index == len(positional):
                    positional.append(arg.value)
        dtypes = [self.dtype(positional[i], region, depth) for i in spec.dtype_args if i < len(positional)]
        if spec.tensor_list and positional and isinstance(positional[0], (cst.List, cst.Tuple)):
            # tf.concat([x, coords], -1): the elements' dtypes (C5), not the list's
            dtypes = [self.dtype(e.value, region, depth) for e in positional[0].elements
                      if not isinstance(e, cst.StarredElement)]
        elif spec.tensor_list and positional and isinstance(positional[0], (cst.ListComp, cst.GeneratorExp)):
            # tf.add_n([tf.nn.l2_loss(w) for w in model.trainable_weights]): the element's dtype
            dtypes = [self.dtype(positional[0].elt, region, depth)]
        if not dtypes:
            return UNK
        if F16 in dtypes and any(d.wide for d in dtypes) and \
                (not region.layer_method or resolved.startswith("keras.")):
            # tf.maximum(x, f32) outside a layer only runs if x is float32 too; keras.ops promote
            # (ops.einsum(f16, f32) computes in float32, by Keras' result_type).
            return next(d for d in dtypes if d.wide)
        joined = join_all(dtypes)
        if joined is PY:
            return F32  # tf.sqrt(2.0): a float32 tensor
        if joined is BOOL and not spec.keeps_bool:
            return UNK
        return joined


    def mapped_element(self, call: cst.Call, index: int, region: Region, depth: int) -> Dtype:
        """Element ``index`` of ``map(f, seq)``: ``f`` of that element of ``seq``, when ``f`` is an op that keeps its
        argument's dtype or a same-file function returning its parameter through such ops; UNK otherwise."""
        if len(call.args) != 2 or any(a.keyword is not None or a.star for a in call.args):
            return UNK
        func, seq = call.args[0].value, call.args[1].value
        element = self.element_dtype(seq, index, region, depth + 1)
        spec = specs.known(self.resolve(func))
        if element is UNK or (spec is not None and spec.result is not specs.Result.PRESERVES):
            return UNK
        if spec is not None:
            return element
        callee = self._same_file_function(cst.Call(func=func), region)
        if callee is None:
            return UNK
        function = callee[0]
        params = [p.name.value for p in function.params.params]
        if params[:1] in (["self"], ["cls"]) and isinstance(func, cst.Attribute):
            params = params[1:]
        bound: dict[str, list[cst.BaseExpression]] = {}
        for assign in assignments(function):
            for target in assign.targets:
                if isinstance(target.target, cst.Name):
                    bound.setdefault(target.target.value, []).append(assign.value)
        returns = [n.value for n in walk(function.body) if isinstance(n, cst.Return)]
        if not params or not returns or any(r is None or not _keeps_dtype_of(r, params[0], bound, self.resolve)
                                            for r in returns):
            return UNK
        return element


R = specs.Result
_FIXED = {R.INT: INT, R.BOOL: BOOL, R.COMPLEX: CPLX, R.REAL: F32}
