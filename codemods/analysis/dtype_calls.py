"""The dtype of a call: TF/Keras ops by the op table (``facts.ops``), layers, models and same-file helpers."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.dtype_lattice import (
    BOOL, CPLX, F16, F32, INT, PY, PYTHON_FUNCS, UNK, Dtype, all_integers, arith, argument, join_all,
)
from mpfix.codemods.analysis.dtype_regions import Region
from mpfix.codemods.facts import heuristics, keras_layers
from mpfix.codemods.facts import ops as specs
from mpfix.codemods.names import dotted_name


class CallDtypes:
    """Mixed into ``DtypeAnalysis``: ``_call_dtype``."""

    def _call_dtype(self, node: cst.Call, region: Region, depth: int) -> Dtype:
        resolved = self.resolve(node.func) or ""
        func_name = dotted_name(node.func) or ""
        if isinstance(node.func, cst.Name) and node.func.value in PYTHON_FUNCS and not resolved:
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
                heuristics.TAPE_NAME.search(dotted_name(node.func.value) or ""):
            return F32  # gradients of the float32 variables (LossScaleOptimizer unscales in float32)
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in keras_layers.OPTIMIZER_RESULTS and \
                heuristics.OPTIMIZER_NAME.search(dotted_name(node.func.value) or ""):
            if keras_layers.OPTIMIZER_RESULTS[node.func.attr.value] == "int":
                return INT
            return self.dtype(node.args[0].value, region, depth) if node.args and node.args[0].keyword is None else UNK
        loss_object = self._loss_object(node, region)
        if loss_object:
            if keras_layers.LOSS_OBJECT_COMPUTES_FLOAT32[self.keras]:
                return F32
            pred = argument(node, "y_pred", 1)
            return self.dtype(pred.value, region, depth) if pred is not None else UNK
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("assign", "assign_add", "assign_sub"):
            return F32  # a variable's assign returns the variable: float32 (the policy's variable dtype)
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
        op = specs.op_name(resolved)
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
                        folded = arith(folded, d, strict=not region.layer_method)
                    if folded.floating_tensor:
                        return folded
                elif callee[1] is None:
                    return UNK  # a function of this file on values of unknown dtype: as unknown as they are
            if region.kind == "shadow":
                return UNK
            if isinstance(node.func, cst.Name) and node.func.value in region.param_dtypes and \
                    not heuristics.MODEL_CALL_NAME.search(node.func.value):
                # A callable parameter (`distance_metric(embeddings)`): it maps its argument, whose
                # dtype is the best guess of its result's.
                passed = [self.dtype(a.value, region, depth) for a in node.args if a.keyword is None][:2]
                wide = [d for d in passed if d.wide]
                if wide:
                    return wide[0]
            return F16  # a layer, model or helper called on tensors
        return self._op_dtype(node, specs.spec_of(op), resolved, region, depth)

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
                    all(all_integers(e.value) or self.dtype(e.value, region, depth) is INT
                        for e in value.elements) else UNK
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
        if spec.name.startswith(("dtypes.", "float", "int")) or spec.short in ("float32", "float16"):
            return PY  # tf.dtypes.float32, tf.float16: a dtype name
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        dtypes = [self.dtype(positional[i], region, depth) for i in spec.dtype_args if i < len(positional)]
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


R = specs.Result
_FIXED = {R.INT: INT, R.BOOL: BOOL, R.COMPLEX: CPLX, R.REAL: F32}
