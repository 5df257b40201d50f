"""What a dtype *spelling* names (``tf.float32``, ``x.dtype``, ``self.compute_dtype``, a policy's compute dtype)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.dtype_lattice import BF16, F16, F32, F64, PY, UNK, Dtype, spelled_dtype
from mpfix.codemods.analysis.dtype_regions import ELEMENT, Region
from mpfix.codemods.facts import keras_layers
from mpfix.codemods.facts import ops as specs


class SpellingDtypes:
    """Mixed into ``DtypeAnalysis``: ``dtype_of_spelling`` and the properties, attributes and policies it follows."""

    def _property_dtype(self, owner: cst.ClassDef, attr: str, depth: int) -> Dtype | None:
        """The dtype a ``@property`` of the class names when every return names the same one
        (``_param_dtype`` returning ``tf.float32`` or ``self.dtype``: float32 under a mixed policy)."""
        prop = self.methods.get(owner, {}).get(attr)
        if prop is None or not any(isinstance(d.decorator, cst.Name) and d.decorator.value == "property"
                                   for d in prop.decorators):
            return None
        shadow = self._shadow(prop, owner)
        found = {self.dtype_of_spelling(value, shadow, depth + 1) for value in shadow.returns}
        return found.pop() if len(found) == 1 and UNK not in found else None

    def dtype_of_spelling(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> Dtype:
        """What a dtype argument gives: ``tf.float32`` → float32, ``x.dtype`` → x's dtype, ``self.dtype`` → float32."""
        spelled = spelled_dtype(node, self.resolve)
        if spelled is not None:
            return spelled
        if isinstance(node, cst.Attribute):
            attr = node.attr.value
            is_self = isinstance(node.value, cst.Name) and node.value.value == "self"
            if attr in ("compute_dtype", "_compute_dtype", "variable_dtype") and not is_self and depth < 8:
                policy = self._policy_dtypes(node.value, region, depth + 1)
                if policy is not None:  # `self._dtype_policy.compute_dtype`, the policy built from a spelling
                    return policy[1] if attr == "variable_dtype" else policy[0]
            if attr in ("compute_dtype", "_compute_dtype"):
                if is_self and region.owner is not None and self.is_layer_class(region.owner) and \
                        self.float32_layer(region.owner):
                    return F32
                return F16 if is_self or region.kind not in ("module", "shadow") else UNK
            if is_self and attr in ("dtype", "variable_dtype", "_dtype") and region.owner is not None \
                    and self.is_layer_class(region.owner):
                return F32  # a layer's dtype is its variable dtype: float32 under mixed policies
            if attr == "base_dtype" and depth < 8:
                return self.dtype_of_spelling(node.value, region, depth + 1)  # `x.dtype.base_dtype`: x's dtype
            if attr == "dtype" and is_self and region.owner is not None and depth < 4:
                named = self._self_spelling(region.owner, attr, depth)
                if named is not None:  # a non-layer class's `dtype` property or attribute (a Keras `Loss`)
                    return named
            if attr == "dtype":
                # `x.dtype` is x's dtype where it is read: its last assignment before (loss.py's `values` is float32
                # when `apply_mask(..., dtype=values.dtype)` runs, float16 only after `values = values * w`).
                inner = self.dtype_at(node.value, node, region, depth + 1) if isinstance(node.value, cst.Name) else \
                    self.dtype(node.value, region, depth + 1)
                if inner is not PY:
                    return inner
                return F16 if region.kind not in ("module", "shadow") else UNK
            if is_self and region.owner is not None and depth < 4:
                named = self._self_spelling(region.owner, attr, depth)
                if named is not None:
                    return named
        if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or) and depth < 8:
            # `self.dtype or tf.float32`: the left one unless it is unknown (None at run time)
            left = self.dtype_of_spelling(node.left, region, depth + 1)
            return left if left is not UNK else self.dtype_of_spelling(node.right, region, depth + 1)
        if isinstance(node, cst.Call) and specs.op_name(self.resolve(node.func)) in ("result_type", "dtypes.result_type") \
                and node.args and depth < 8:
            # backend.result_type(inputs.dtype, "float32"): the promoted dtype (float16 with float32 is float32).
            found = {self.dtype_of_spelling(a.value, region, depth + 1) for a in node.args if a.keyword is None}
            wide = [d for d in (F64, F32) if d in found]
            return wide[0] if wide else (found.pop() if len(found) == 1 else UNK)
        if isinstance(node, cst.Name) and depth < 8:
            values = region.assigned.get(node.value, [])
            if len(values) == 1 and values[0] is not ELEMENT and not isinstance(values[0], cst.Name):
                return self.dtype_of_spelling(values[0], region, depth + 1)  # `compute_dtype = result_type(...)`
        if isinstance(node, cst.Name) and node.value in ("dtype", "compute_dtype"):
            if node.value in region.spelled:
                return region.spelled[node.value]  # every caller in the file passes this spelling
            if region.env.get(node.value) not in (None, PY, UNK):
                return region.env[node.value]
        return F16 if region.kind not in ("module", "shadow") else UNK

    def _self_spelling(self, owner: cst.ClassDef, attr: str, depth: int) -> Dtype | None:
        """The dtype ``self.attr`` names: a property's returns, or the one value it is assigned."""
        named = self._property_dtype(owner, attr, depth)
        if named is not None or attr in self.methods.get(owner, {}):
            return named
        values = self.attribute_values(owner, attr)
        if len(values) != 1:
            return None
        func, value = values[0]
        found = self.dtype_of_spelling(value, self._shadow(func, owner), depth + 1)
        return found if found is not UNK else None

    def _policy_dtypes(self, node: cst.BaseExpression, region: Region, depth: int) -> tuple[Dtype, Dtype] | None:
        """(compute, variable) dtypes of a dtype policy ``node`` is built as (``dtype_policies.get(name)``,
        ``DTypePolicy(name)``, ``mixed_precision.Policy(name)``), directly or as the one value of ``self.x``."""
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self" and \
                region.owner is not None:
            values = self.attribute_values(region.owner, node.attr.value)
            if len(values) != 1:
                return None
            func, node = values[0]
            region = self._shadow(func, region.owner)
        if not isinstance(node, cst.Call) or not keras_layers.builds_policy(self.resolve(node.func)) or not node.args:
            return None
        named = self.dtype_of_spelling(node.args[0].value, region, depth)
        if named is UNK:
            return None
        return named, (F32 if named in (F16, BF16) else named)  # mixed_float16: float16 compute, float32 variables
