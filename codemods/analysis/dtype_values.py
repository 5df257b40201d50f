"""What a value is known to be besides its dtype: centred on its own mean, a weight's initial value.

``centred``: ``x - mean`` with ``mean`` a mean of ``x`` (MP203: the mean of its square is a variance).
``initial_value``: ``self.p = self.add_weight(initializer=keras.initializers.Constant(self.init_p))`` with
``init_p`` a constructor default: a learned weight starts there, so a GeM pooling's ``power(x, self.p)`` is
a cube from the first step (MP204; benchmarks/unseen/gem_pool_k3.py).
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.dtype_lattice import argument
from mpfix.codemods.analysis.dtype_regions import Region
from mpfix.codemods.facts import keras_layers
from mpfix.codemods.facts import ops as specs


class KnownValues:
    """Mixed into ``DtypeAnalysis``: ``centred``, ``initial_value``."""

    def centred(self, node: cst.BaseExpression, region: Region) -> bool:
        """``x - mean`` where ``mean`` is a mean of ``x`` (``tf.reduce_mean(x, axis)`` inline or bound once to a
        name, or the first element of ``tf.nn.moments(x, axes)``): its square's mean is x's variance."""
        if not isinstance(node, cst.BinaryOperation) or not isinstance(node.operator, cst.Subtract):
            return False
        of = self.module.code_for_node(node.left)
        centre = node.right
        if isinstance(centre, cst.Name):
            values = region.assigned.get(centre.value, [])
            if len(values) != 1:
                return False
            moments = [(s, i) for s, i in region.unpacked.get(centre.value, ()) if isinstance(s, cst.Call)]
            if moments:
                return len(moments) == 1 and moments[0][1] == 0 and self._op_of(moments[0][0], "moments", of)
            centre = values[0]
        return isinstance(centre, cst.Call) and self._op_of(centre, specs.Kind.MEAN, of)

    def _op_of(self, call: cst.Call, what: "specs.Kind | str", of: str) -> bool:
        """``call`` is an op of kind ``what`` (or with that short name) whose first argument is spelled ``of``."""
        spec = specs.known(self.resolve(call.func))
        first = next((a.value for a in call.args if a.keyword is None and not a.star), None)
        if spec is None or first is None or self.module.code_for_node(first) != of:
            return False
        return spec.short == what if isinstance(what, str) else spec.has(what)

    def initial_value(self, node: cst.BaseExpression, region: Region) -> float | None:
        """The value a layer weight ``self.attr`` starts at: built once with a constant initializer
        (``keras.initializers.Constant(3.0)``, ``tf.constant_initializer(c)``) whose value is a literal or a
        constructor default (through ``self.init_p = p``)."""
        if not isinstance(node, cst.Attribute) or not isinstance(node.value, cst.Name) or \
                node.value.value != "self" or region.owner is None:
            return None
        values = self.attribute_values(region.owner, node.attr.value)
        if len(values) != 1 or not isinstance(values[0][1], cst.Call):
            return None
        built = values[0][1]
        if not isinstance(built.func, cst.Attribute) or built.func.attr.value not in keras_layers.WEIGHT_BUILDERS:
            return None
        initializer = argument(built, "initializer", None)
        if initializer is None or not isinstance(initializer.value, cst.Call) or \
                (self.resolve(initializer.value.func) or "") not in keras_layers.CONSTANT_INITIALIZERS:
            return None
        value = argument(initializer.value, "value", 0)
        found = self.constant(value.value, region) if value is not None else None
        return found[0] if found is not None else None
