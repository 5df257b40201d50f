"""The dtype of an expression in a region: names, attributes, constants, tuple elements, same-file calls."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.dtype_lattice import (
    BF16, BITWISE, BOOL, CPLX, F16, F32, F64, INT, PY, UNK, Dtype, arith, argument, comparison_parts, join, join_all, number,
    spelled_dtype,
)
from mpfix.codemods.analysis.bindings import BindingKind, decompose
from mpfix.codemods.analysis.dtype_regions import ELEMENT, FLOAT32_VARIABLE, Region
from mpfix.codemods.analysis.dtype_syntax import assignments, through_builders
from mpfix.codemods.analysis.param_defaults import unpassed_default
from mpfix.codemods.facts import heuristics, keras_layers
from mpfix.codemods.facts import ops as specs
from mpfix.codemods.names import dotted_name

ASSIGN = BindingKind.ASSIGN


class ExpressionDtypes:
    """Mixed into ``DtypeAnalysis``: ``dtype(node, region)`` and the facts it rests on."""

    def constant(self, node: cst.BaseExpression, region: Region | None) -> tuple[float, cst.BaseExpression] | None:
        """``(value, literal node)`` of a literal, a name bound once to a literal, or an attribute
        bound to one (``self.mask_value = mask_value`` with ``mask_value=-1e9`` in ``__init__``)."""
        value = number(node)
        if value is not None:
            return value, node
        if isinstance(node, cst.Call) and not node.args:
            known = keras_layers.KERAS_CONSTANTS.get(self.resolve(node.func) or "")
            return (known, node) if known is not None else None
        if isinstance(node, cst.Name):
            values = region.assigned.get(node.value) if region else None
            if values:
                if len(values) == 1 and number(values[0]) is not None:
                    return number(values[0]), values[0]
                return None
            if region and node.value in region.env:  # a parameter: its default if no call in the file passes it
                default = unpassed_default(region.node, node.value, self.all_calls)
                return (number(default), default) if default is not None and number(default) is not None else None
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
                for assign in assignments(func):  # `self.x = v`, and paired `self.p, self.eps = p, eps` (bindings)
                    for b in (b for t in assign.targets for b in decompose(t.target, assign.value, assign, (), ASSIGN)):
                        if b.name.startswith("self.") and b.name.count(".") == 1 and b.element is None and not b.starred:
                            table.setdefault(b.name[5:], []).append((func, b.value))
            for base in cls.bases:
                spelled = self.code(base.value)
                parent = self.classes.get(spelled)
                if parent is not None and parent is not cls:
                    for name, values in self.attribute_values_table(parent).items():
                        table.setdefault(name, list(values))
        return table.get(attr, [])

    def attribute_values_table(self, cls: cst.ClassDef):
        self.attribute_values(cls, "")
        return self._attributes[cls]

    def attribute_dtype(self, cls: cst.ClassDef, attr: str, depth: int = 0, in_call: bool = False) -> Dtype:
        """The dtype of ``self.attr`` in a method of ``cls`` (``in_call``: a method the layer's ``call`` runs)."""
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
            for func, value in through_builders(values):
                if self._float32_variable(value, func, cls):
                    dtypes.add(F32)
                    continue
                if in_call and self._autocast_weight(value, func, cls):
                    # Keras (both generations) reads a floating weight in the compute dtype inside `__call__`.
                    dtypes.add(F32 if self.float32_layer(cls) else F16)
                    continue
                if isinstance(value, cst.Call) and self.resolve(value.func) in keras_layers.PLAIN_VARIABLES:
                    # `self.w = tf.Variable(...)`: a plain variable, read in its own dtype also in `call` (C35).
                    variable = self.dtype(value, self.region_for(func, cls), depth + 1)
                    if variable is UNK:
                        return UNK
                    dtypes.add(variable)
                    continue
                if self._builds_layer(value):
                    return UNK
                dtypes.add(self.dtype(value, self.region_for(func, cls), depth + 1))
            return join_all(dtypes)
        finally:
            self._attribute_stack.discard(key)

    def keras_variable(self, node: cst.BaseExpression, region: Region) -> bool:
        """``self.w`` of a layer whose every binding is ``self.add_weight(...)``: a Keras variable object (its
        Python operators follow ``keras_layers.VARIABLE_OPERATORS_PROMOTE``), not a tensor."""
        if not isinstance(node, cst.Attribute) or not isinstance(node.value, cst.Name) or \
                node.value.value != "self" or region.owner is None:
            return False
        values = through_builders(self.attribute_values(region.owner, node.attr.value))
        return bool(values) and all(
            isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute) and
            isinstance(v.func.value, cst.Name) and v.func.value.value == "self" and
            v.func.attr.value in keras_layers.WEIGHT_BUILDERS for _func, v in values)

    def _autocast_weight(self, value: cst.BaseExpression, func: cst.FunctionDef, cls: cst.ClassDef) -> bool:
        """``self.add_weight(...)`` of a floating dtype, autocast (the default) in a layer that autocasts: an
        AutoCastVariable (tf_keras) / a KerasVariable read under the autocast scope (Keras 3)."""
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute) or \
                value.func.attr.value not in ("add_weight", "add_variable") or \
                not isinstance(value.func.value, cst.Name) or value.func.value.value != "self":
            return False
        if any(a.keyword is not None and a.keyword.value in ("autocast", "experimental_autocast") for a in value.args):
            return False
        if not self.is_layer_class(cls) or not self.autocasts(cls):
            return False
        dtype = argument(value, "dtype", None)
        if dtype is None:
            return True
        spelled = spelled_dtype(dtype.value, self.resolve)
        if spelled is None:
            spelled = self.dtype_of_spelling(dtype.value, self._shadow(func, cls))
        return spelled.floating_tensor

    def _builds_layer(self, value: cst.BaseExpression) -> bool:
        if not isinstance(value, cst.Call):
            return False
        func = value.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        return name[:1].isupper() or name in ("Variable", "add_weight", "add_variable")

    def layer_output_dtype(self, layer: cst.BaseExpression, region: Region) -> Dtype | None:
        """The output dtype of calling ``layer`` (a constructor call, ``self.attr`` or a name) when it is built
        with a dtype (``LayerNormalization(dtype=tf.float32)``, a model whose output layer is float32); UNK
        when its constructors disagree (one branch float32, the other not); None when none says."""
        if isinstance(layer, cst.Call):
            built = [layer]
        elif isinstance(layer, cst.Attribute) and isinstance(layer.value, cst.Name) and layer.value.value == "self" \
                and region.owner is not None:
            built = [v for _, v in self.attribute_values(region.owner, layer.attr.value)]
        elif isinstance(layer, cst.Name):
            built = region.assigned.get(layer.value, [])
            if not built and layer.value not in region.env:
                built = self.module_values.get(layer.value, [])  # `model = keras.Sequential([...])` at top level
            if len(built) == 1 and isinstance(built[0], cst.Subscript):
                built = self._listed_layers(built[0], region)  # `self_attention_layer = layer[0]` (N11: mp2)
        else:
            return None
        if not built or not all(isinstance(b, cst.Call) for b in built):
            return None
        declared = {self._declared_output(b, region.owner) for b in built}
        if declared == {None}:
            return None
        return declared.pop() if len(declared) == 1 else UNK

    def _declared_output(self, built: cst.Call, owner: cst.ClassDef | None = None) -> Dtype | None:
        """What a layer or model construction (in a method of ``owner``) says its output dtype is (None: the
        compute dtype)."""
        resolved = self.resolve(built.func) or ""
        if resolved.endswith(("Sequential", "keras.Model", "keras.models.Model")) and resolved.startswith("keras."):
            return self._model_output(built, resolved)
        if not self._builds_layer(built):
            return None
        dtype_arg = argument(built, "dtype", None)
        if dtype_arg is not None and owner is not None and self._variable_dtype(dtype_arg.value, owner):
            return F32
        if dtype_arg is None:
            return self._float32_by_construction(built)
        return spelled_dtype(dtype_arg.value, self.resolve)

    def _float32_by_construction(self, built: cst.Call) -> Dtype | None:
        """A layer class of this file whose ``call`` returns float32 whatever its inputs (a ``dtype="float32"``
        sublayer's output, ``tf.cast(..., tf.float32)`` values) outputs float32 under a policy too: Keras casts
        a layer's inputs, never its outputs (C36, C37: research detr_lib.py's wrapper and position embedding)."""
        cls = self.classes.get(self.code(built.func))
        call = self.methods.get(cls, {}).get("call") if cls is not None and self.is_layer_class(cls) else None
        return F32 if call is not None and self.return_dtype(call, cls) is F32 else None

    def _variable_dtype(self, value: cst.BaseExpression, cls: cst.ClassDef) -> bool:
        """``dtype=self.dtype`` in a layer's method: ``Layer.dtype`` is the policy's variable dtype in both
        generations, float32 under every mixed policy, so a sublayer built with it is a float32 layer (tfm
        gaussian_process.py ``Dense(..., dtype=self.dtype)``; TF 2.21: its output is float32)."""
        if not isinstance(value, cst.Attribute) or not isinstance(value.value, cst.Name) or \
                value.value.value != "self" or value.attr.value not in ("dtype", "variable_dtype"):
            return False
        return self.is_layer_class(cls) and not self.attribute_values(cls, value.attr.value)

    def _model_output(self, built: cst.Call, resolved: str) -> Dtype | None:
        """A model's output dtype is its output layer's: ``Sequential([..., Dense(1, dtype="float32")])``,
        ``Model(inputs, outputs)`` with ``outputs = Dense(1, dtype="float32")(x)`` at module level."""
        if resolved.endswith("Sequential"):
            layers = argument(built, "layers", 0)
            if layers is None or not isinstance(layers.value, (cst.List, cst.Tuple)) or not layers.value.elements:
                return None
            last = layers.value.elements[-1].value
            return self._declared_output(last) if isinstance(last, cst.Call) else None
        outputs = argument(built, "outputs", 1)
        value = outputs.value if outputs is not None else None
        if isinstance(value, cst.Name):
            values = self.module_values.get(value.value, [])
            value = values[0] if len(values) == 1 else None
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Call):
            return self._declared_output(value.func)  # Dense(1, dtype="float32")(x)
        return None

    def dtype_at(self, node: cst.BaseExpression, at: cst.CSTNode, region: Region, depth: int = 0) -> Dtype:
        """The dtype of ``node`` where ``at`` runs: a name's last assignment before it.

        ``outputs = model(x)`` … ``outputs = tf.nest.map_structure(lambda x: tf.cast(x, tf.float32),
        outputs)`` … ``self.build_losses(model_outputs=outputs)``: flow-insensitively ``outputs``
        is both float16 and float32 (unknown); at the call it is the float32 one.
        """
        for _ in range(4):
            if not (isinstance(node, cst.Name) and len(region.assigned.get(node.value, [])) > 1):
                break
            where = self.order.get(at, -1)
            # Plain assignments only: an unpacked name (`a, b = None, None` too, whose table value is the element)
            # is left to the joined table, as for `a, b = f()`.
            paired = {id(s.elements[i].value) for s, i in region.unpacked.get(node.value, ())
                      if isinstance(s, (cst.Tuple, cst.List)) and i < len(s.elements)}
            before = [v for v in region.assigned[node.value]
                      if -1 < self.order.get(v, -1) < where and id(v) not in paired]
            if not before:
                break
            value = before[-1]
            if isinstance(value, cst.Call) and self.resolve(value.func) == "tensorflow.nest.map_structure" and \
                    len(value.args) == 2 and not isinstance(value.args[0].value, cst.Lambda):
                # outputs = tf.nest.map_structure(tf.math.softmax, outputs): dtype unchanged.
                node, at = value.args[1].value, value
                continue
            return self.dtype(value, region, depth + 1)
        return self.dtype(node, region, depth + 1)

    def element_dtype(self, source: cst.BaseExpression, index: int, region: Region, depth: int = 0) -> Dtype:
        """The dtype of element ``index`` of ``a, b = source`` (a model's tuple output, ``tf.split``)."""
        if isinstance(source, (cst.Tuple, cst.List)):
            elements = source.elements
            if index < len(elements) and not isinstance(elements[index], cst.StarredElement):
                return self.dtype(elements[index].value, region, depth + 1)
            return UNK
        if isinstance(source, cst.Call) and dotted_name(source.func) == "map" and "map" not in self.functions:
            return self.mapped_element(source, index, region, depth + 1)  # `q, k, v = map(self.split_heads, (q, k, v))`
        if isinstance(source, (cst.ListComp, cst.GeneratorExp)):
            # `q, k, v = [t for t in tf.split(qkv, 3, -1)]`: every element is the comprehension's `elt`.
            return self.dtype(source.elt, region, depth + 1)
        if isinstance(source, (cst.Name, cst.Attribute, cst.Subscript)):
            # `mean, log_var = inputs`: a structure of tensors autocast as a whole (tf_keras
            # autocasts the nested structure of its first argument).
            structure = self.dtype(source, region, depth + 1)
            return structure if structure in (F16, F32, F64, BF16) else UNK
        if not isinstance(source, cst.Call):
            return UNK
        if self.resolve(source.func) in keras_layers.RESHAPES_ARGUMENTS:
            positional = [a.value for a in source.args if a.keyword is None and not a.star]
            return self.dtype(positional[index], region, depth + 1) if index < len(positional) else UNK
        spec = specs.lookup(self.resolve(source.func))
        if spec is not None:
            if spec.elements is specs.Elements.UNKNOWN or not source.args:
                return UNK
            if spec.elements is specs.Elements.VALUES_THEN_INT and index > 0:
                return INT
            return self.dtype(source.args[0].value, region, depth + 1)
        callee = self._same_file_function(source, region)
        if callee is not None:
            func, owner = callee
            own = self.region_for(func, owner)
            found = set()
            for value in own.returns:
                passed = self._passed_for(value, index, func, own, source)
                if passed is not None:  # `return x1, x2` of parameters: what this call passes them
                    found.add(self.dtype(passed, region, depth + 1))
                    continue
                # `return ops.moments(x, axes)` as well as `return mean, variance`
                found.add(self.element_dtype(value, index, own, depth + 1) if depth < 8 else UNK)
            dtype = join_all(found)
            if dtype is not UNK:
                return dtype
        # A model's or layer's outputs (`logits, aux = self.model(x)`) are in the compute dtype.
        if self._is_model_or_layer_call(source, region):
            declared = self.layer_output_dtype(source.func, region)
            return declared or F16
        return UNK

    @staticmethod
    def _passed_for(value: cst.BaseExpression, index: int, func: cst.FunctionDef, own: Region,
                    call: cst.Call) -> cst.BaseExpression | None:
        """The argument ``call`` passes for element ``index`` of ``return a, b`` when that element is a parameter of
        ``func`` whose dtype its body keeps (``x2 = ops.expand_dims(x2, -1)``); None otherwise."""
        if not isinstance(value, (cst.Tuple, cst.List)) or index >= len(value.elements):
            return None
        element = value.elements[index].value
        if not isinstance(element, cst.Name) or own.env.get(element.value) is not own.param_dtypes.get(element.value):
            return None
        names = [p.name.value for p in [*func.params.posonly_params, *func.params.params]]
        if names and names[0] in ("self", "cls") and isinstance(call.func, cst.Attribute):
            names = names[1:]
        if element.value not in names:
            return None
        arg = argument(call, element.value, names.index(element.value))
        return arg.value if arg is not None else None

    def _is_model_or_layer_call(self, call: cst.Call, region: Region) -> bool:
        if region.kind in ("module", "shadow"):
            return False
        name = dotted_name(call.func) or ""
        last = name.split(".")[-1]
        if name == "self":
            return region.in_class
        if heuristics.MODEL_CALL_NAME.search(last):
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
            func = region.nested.get(call.func.value)
            if func is not None:
                return func, region.owner  # a closure sees the method's `self`
            func = self.functions.get(call.func.value)
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

    def dtype(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> Dtype:
        """The dtype of ``node`` in ``region`` (memoized once the file's analysis is complete)."""
        if depth > 30:
            return UNK
        # Memoized per region; every change of the region's name table clears the memo.
        key = id(node) if self.flow else -id(node)
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
            if node is FLOAT32_VARIABLE:
                return F32
            if node is ELEMENT:
                return UNK
            if value in region.env:
                found = region.env[value]
                if self._final and self.flow:  # the assignments reaching here (dtype_env.flow_read)
                    found = self.flow_read(node, region, found, deeper)
                return found
            outer = region.enclosing
            while outer is not None:  # a closure reads the enclosing function's names
                if value in outer.env:
                    return outer.env[value]
                outer = outer.enclosing
            if value in self.module_constants:
                return PY
            return UNK
        if node_type is cst.UnaryOperation:
            inner = self.dtype(node.expression, region, deeper)
            if type(node.operator) is cst.Not:
                return BOOL if inner not in (PY,) else PY
            return inner
        if node_type is cst.BinaryOperation:
            left, right = self.dtype(node.left, region, deeper), self.dtype(node.right, region, deeper)
            if type(node.operator) in BITWISE and BOOL in (left, right):
                return BOOL
            return arith(left, right, strict=not region.layer_method)
        if node_type in (cst.Comparison, cst.BooleanOperation):
            parts = comparison_parts(node)
            return PY if all(self.dtype(n, region, deeper) is PY for n in parts) else BOOL
        if node_type is cst.IfExp:
            body, orelse = self.dtype(node.body, region, deeper), self.dtype(node.orelse, region, deeper)
            if {body, orelse} in ({F16, F32}, {F16, F64}, {UNK, F32}) and self._casts_the_other(node):
                # `tf.cast(x, tf.float32) if convert else x`: cast where needed, so the float16 path is float32.
                return body if body.wide else orelse
            return join(body, orelse)
        if node_type is cst.Attribute:
            attr = node.attr.value
            if attr in ("shape", "ndim", "dtype", "base_dtype", "compute_dtype", "variable_dtype", "name", "rank"):
                return PY
            if attr in ("real", "imag"):
                return F32
            if type(node.value) is cst.Name and node.value.value == "self" and region.owner is not None:
                return self.attribute_dtype(region.owner, attr, depth, in_call=region.layer_method)
            return UNK
        if node_type is cst.Subscript:
            return self.dtype(node.value, region, deeper)
        if node_type is cst.Call:
            return self._call_dtype(node, region, deeper)
        return UNK

    def _casts_the_other(self, node: cst.IfExp) -> bool:
        code = self.module.code_for_node
        for cast_branch, other in ((node.body, node.orelse), (node.orelse, node.body)):
            spec = specs.lookup(self.resolve(cast_branch.func)) if isinstance(cast_branch, cst.Call) else None
            if spec is not None and spec.is_cast and cast_branch.args and \
                    code(cast_branch.args[0].value) == code(other):
                return True
        return False

    def _float32_variable(self, value: cst.BaseExpression, func: cst.FunctionDef, cls: cst.ClassDef) -> bool:
        """``self.add_weight(..., autocast=False)`` (tf_keras: ``experimental_autocast=False``): a variable read
        in its own dtype, float32 under a mixed policy (batch normalisation's moving statistics), also when its
        dtype is a property naming float32 (tf_keras BatchNormalization's ``dtype=self._param_dtype``)."""
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute) or \
                value.func.attr.value not in ("add_weight", "add_variable"):
            return False
        flag = next((a for a in value.args if a.keyword is not None and
                     a.keyword.value in ("autocast", "experimental_autocast")), None)
        if flag is None or not isinstance(flag.value, cst.Name) or flag.value.value != "False":
            return False
        dtype = argument(value, "dtype", None)
        if dtype is None:
            return True
        spelled = spelled_dtype(dtype.value, lambda n: None)
        if spelled is None and isinstance(dtype.value, cst.Attribute):
            spelled = self.dtype_of_spelling(dtype.value, self._shadow(func, cls))
        return (spelled or UNK).wide
