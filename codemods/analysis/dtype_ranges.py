"""What is known of an expression's values by its form: ≤ 0, ≥ 0, ≤ 1, an upper bound.

Op knowledge comes from the op table (``facts.ops``: each op's ``Range`` and kinds).
"""

from __future__ import annotations

from enum import Enum, auto

import libcst as cst

from mpfix.codemods._walk import children, walk
from mpfix.codemods.analysis.dtype_lattice import BOOL, INT, PY, argument, first_arg, number
from mpfix.codemods.analysis.dtype_regions import Region
from mpfix.codemods.analysis.dtype_tables import own
from mpfix.codemods.facts import heuristics, keras_layers
from mpfix.codemods.facts import ops as specs

Kind, Range, Order = specs.Kind, specs.Range, specs.Order
_MAX_BINDINGS = 6  # a name bound more often is not followed through every binding


class Ascends(Enum):
    """Along which axes a value is known to be non-decreasing."""

    ONE_D = auto()  # a 1-D sequence (linspace, range): ``m[k:] - m[:-k]`` and ``m[..., k:] - m[..., :-k]`` are ≥ 0
    LAST_AXIS = auto()  # along its last axis, of any rank (sort): ``m[..., k:] - m[..., :-k]`` only


class ValueRanges:
    """Mixed into ``DtypeAnalysis``."""

    def nonpositive(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> bool:
        """``node`` ≤ 0 by its form: ``-x**2``, ``-abs(x)``, ``-log(P) * i / n`` (``P`` > 1, ``i, n`` ≥ 0)."""
        if depth > 8:
            return False
        value = number(node)
        if value is not None:
            return value <= 0
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            return self.nonnegative(node.expression, region, depth + 1)
        if isinstance(node, cst.BinaryOperation):
            op = node.operator
            if isinstance(op, (cst.Multiply, cst.Divide)):
                left_neg, right_neg = self.nonpositive(node.left, region, depth + 1), self.nonpositive(node.right, region, depth + 1)
                left_pos, right_pos = self.nonnegative(node.left, region, depth + 1), self.nonnegative(node.right, region, depth + 1)
                return (left_neg and right_pos) or (left_pos and right_neg)
            if isinstance(op, cst.Subtract):
                return self._minus_own_max(node, region) or (
                    self.nonpositive(node.left, region, depth + 1) and self.nonnegative(node.right, region, depth + 1))
            if isinstance(op, cst.Add):
                return self.nonpositive(node.left, region, depth + 1) and self.nonpositive(node.right, region, depth + 1)
        if isinstance(node, cst.Name):
            return self._every_binding(node, region, self.nonpositive, depth)
        if isinstance(node, (cst.List, cst.Tuple)):  # concat([a, b]): every element
            return bool(node.elements) and all(self.nonpositive(e.value, region, depth + 1) for e in node.elements)
        if isinstance(node, cst.Call):
            spec = specs.lookup(self.resolve(node.func))
            inner = first_arg(node)
            if spec is None:
                return False
            if spec.range is Range.NONPOSITIVE:
                return True
            if inner is None:
                return False
            if spec.has(Kind.NEGATIVE):
                return self.nonnegative(inner, region, depth + 1)
            if spec.range is Range.FOLLOWS:
                return self.nonpositive(inner, region, depth + 1)
            if spec.has(Kind.LOG) and not spec.has(Kind.LOG1P):
                return self.at_most_one(inner, region)  # log(p) ≤ 0 for p ≤ 1
        return False

    def _minus_own_max(self, node: cst.BinaryOperation, region: Region) -> bool:
        """``x - reduce_max(x, ...)`` (also ``ops.max``/``amax``, through ``stop_gradient`` and a name
        assigned once): the stable softmax/logsumexp shift, ≤ 0. ``x`` must be the same expression,
        and a name ``x`` must not be reassigned (its value could differ from the one maximised)."""
        code = self.module.code_for_node
        right, hops = node.right, 0
        while hops < 4:
            hops += 1
            if isinstance(right, cst.Name):
                values = region.assigned.get(right.value, [])
                if len(values) != 1:
                    return False
                right = values[0]
            elif self._is(right, Kind.STOP_GRADIENT) and first_arg(right) is not None:
                right = first_arg(right)
            else:
                break
        if not self._is(right, Kind.MAX):
            return False
        maximised = first_arg(right)
        if maximised is None or code(maximised).strip() != code(node.left).strip():
            return False
        stack, names = [node.left], set()
        while stack:
            current = stack.pop()
            if isinstance(current, cst.Name):
                names.add(current.value)
            stack.extend(children(current))
        return all(len(region.assigned.get(name, [])) <= 1 for name in names)

    def at_most_one(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> bool:
        """``node`` ≤ 1: a probability (sigmoid, softmax), a 0/1 mask cast from bool, or a clip whose
        upper bound is at most 1 (through names bound once and shape ops)."""
        if depth > 8:
            return False
        if isinstance(node, cst.Name):
            values = region.assigned.get(node.value, [])
            return len(values) == 1 and self.at_most_one(values[0], region, depth + 1)
        if not isinstance(node, cst.Call):
            return False
        spec = specs.lookup(self.resolve(node.func))
        if spec is None:
            return False
        if spec.range is Range.UNIT or (spec.is_cast and first_arg(node) is not None and
                                        self.dtype(first_arg(node), region) is BOOL):
            return True
        if spec.has(Kind.CLIP) and len(node.args) >= 3:
            high = number(node.args[2].value)
            return high is not None and high <= 1
        if spec.range is Range.FOLLOWS and first_arg(node) is not None:
            return self.at_most_one(first_arg(node), region, depth + 1)  # reshape(softmax(x)), stop_gradient(p)
        return False

    def probability(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> bool:
        """A softmax/sigmoid output (through names bound once and shape ops): it can round to 0 in
        float16 (below 6e-8), where ``log`` gives -inf."""
        if depth > 8:
            return False
        if isinstance(node, cst.Name):
            values = region.assigned.get(node.value, [])
            return len(values) == 1 and self.probability(values[0], region, depth + 1)
        spec = specs.lookup(self.resolve(node.func)) if isinstance(node, cst.Call) else None
        if spec is None:
            return False
        if spec.has(Kind.PROBABILITY):
            return True
        return spec.range is Range.FOLLOWS and not spec.is_cast and first_arg(node) is not None and \
            self.probability(first_arg(node), region, depth + 1)

    def unit_interval(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> bool:
        """``node`` in [0, 1] by its form: a probability (an op's, or a Keras layer's built with a probability
        activation, or a model's own predictions in its loss hook when its ``call`` returns only such values),
        ``1 - p``, ``p * q``, a clip into [0, 1]; through names bound once, subscripts and shape ops."""
        if depth > 8:
            return False
        deeper = depth + 1
        if isinstance(node, cst.Name):
            if node.value in region.param_dtypes and node.value not in region.assigned:
                return self._own_predictions(node.value, region) and self._returns_unit(region.owner, deeper)
            values = region.assigned.get(node.value, [])
            return len(values) == 1 and self.unit_interval(values[0], region, deeper)
        if isinstance(node, cst.Subscript):
            return self.unit_interval(node.value, region, deeper)
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Subtract):
                return number(node.left) == 1 and self.unit_interval(node.right, region, deeper)
            return isinstance(node.operator, cst.Multiply) and all(
                self.unit_interval(side, region, deeper) for side in (node.left, node.right))
        if not isinstance(node, cst.Call):
            return False
        if self._probability_layer(node.func, region):
            return True
        spec = specs.lookup(self.resolve(node.func))
        if spec is None:
            return False
        if spec.range is Range.UNIT:
            return True
        if spec.has(Kind.CLIP) and len(node.args) >= 3:
            low, high = number(node.args[1].value), number(node.args[2].value)
            return low is not None and high is not None and low >= 0 and high <= 1
        return spec.range is Range.FOLLOWS and first_arg(node) is not None and \
            self.unit_interval(first_arg(node), region, deeper)

    def _own_predictions(self, name: str, region: Region) -> bool:
        """``name`` is the parameter of a Keras model's loss hook that Keras fills with the model's output
        (``compute_loss(..., y_pred)``: ``keras_layers.MODEL_PREDICTIONS``)."""
        func, owner = region.node, region.owner
        return isinstance(func, cst.FunctionDef) and owner is not None and self.is_layer_class(owner) and \
            keras_layers.MODEL_PREDICTIONS.get(func.name.value) == name

    def _returns_unit(self, cls: cst.ClassDef | None, depth: int) -> bool:
        call = self.methods.get(cls, {}).get("call") if cls is not None else None
        if call is None or depth > 8:
            return False
        own = self.region_for(call, cls)
        return bool(own.returns) and all(self.unit_interval(v, own, depth + 1) for v in own.returns)

    def _probability_layer(self, func: cst.BaseExpression, region: Region) -> bool:
        """``func`` is bound once (``self.head = ...`` in the class, or a name) to a Keras layer whose output is a
        probability: built with a probability activation, or a ``Softmax`` layer."""
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self" and \
                region.owner is not None:
            values = [v for _, v in self.attribute_values(region.owner, func.attr.value)]
        elif isinstance(func, cst.Name):
            values = region.assigned.get(func.value) or self.module_values.get(func.value, [])
        else:
            values = [func]
        if len(values) != 1 or not isinstance(values[0], cst.Call):
            return False
        built = values[0]
        resolved = self.resolve(built.func) or ""
        kind = resolved.rpartition(".")[2]
        if not resolved.startswith(("keras.layers.", "keras.src.layers.")):
            return False
        if kind in keras_layers.PROBABILITY_LAYERS:
            return True
        activation = argument(built, "activation", 0 if kind == "Activation" else None)
        if activation is None:
            return False
        value = activation.value
        if isinstance(value, cst.SimpleString):
            return str(value.evaluated_value).lower() in keras_layers.PROBABILITY_ACTIVATIONS
        spec = specs.lookup(self.resolve(value))
        return spec is not None and spec.has(Kind.PROBABILITY)

    def _is(self, node: cst.BaseExpression, kind: "specs.Kind") -> bool:
        if not isinstance(node, cst.Call):
            return False
        spec = specs.lookup(self.resolve(node.func))
        return spec is not None and spec.has(kind)

    def upper_bound(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> float | None:
        """A number ``node`` cannot exceed by its form: ``clip_by_value(x, lo, 10.0)``, ``minimum(x, 5.0)``,
        ``tanh(x)``, a literal, ``-nonnegative``, sums and products of bounded parts; None when unbounded or unknown."""
        if depth > 8:
            return None
        value = number(node)
        if value is not None:
            return value
        if self.nonpositive(node, region, depth + 1):
            return 0.0
        if isinstance(node, cst.Name):
            values = region.assigned.get(node.value, [])
            return self.upper_bound(values[0], region, depth + 1) if len(values) == 1 else None
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            left, right = self.upper_bound(node.left, region, depth + 1), self.upper_bound(node.right, region, depth + 1)
            return None if left is None or right is None else left + right
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Multiply, cst.Divide)):
            # bounded * positive constant (x / temperature with a literal temperature)
            left, factor = self.upper_bound(node.left, region, depth + 1), number(node.right)
            if left is not None and factor is not None and factor > 0:
                return left * factor if isinstance(node.operator, cst.Multiply) else left / factor
            return None
        if isinstance(node, cst.Call):
            spec = specs.known(self.resolve(node.func))
            if spec is None:
                return None
            if spec.has(specs.Kind.CLIP) and len(node.args) >= 3:
                high = argument(node, "clip_value_max", 2) or argument(node, "x_max", 2)
                return number(high.value) if high is not None else None
            if spec.has(specs.Kind.CEILING) and len(node.args) >= 2:
                bounds = [b for b in (self.upper_bound(a.value, region, depth + 1) for a in node.args[:2]) if b is not None]
                return min(bounds) if bounds else None
            if spec.range is specs.Range.UNIT or spec.has(specs.Kind.BOUNDED):
                return 1.0  # a probability; tanh, sin, cos, erf lie in [-1, 1] whatever their input
            if spec.range is specs.Range.FOLLOWS and node.args:
                return self.upper_bound(node.args[0].value, region, depth + 1)
        return None

    def nonnegative(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> bool:
        if depth > 8:
            return False
        value = number(node)
        if value is not None:
            return value >= 0
        if isinstance(node, cst.BinaryOperation):
            op = node.operator
            if isinstance(op, cst.Power):
                exponent = number(node.right)
                return (exponent is not None and exponent % 2 == 0) or self.nonnegative(node.left, region, depth + 1)
            if isinstance(op, (cst.Multiply, cst.Divide, cst.Add)):
                same = isinstance(op, cst.Multiply) and self.module.code_for_node(node.left) == self.module.code_for_node(node.right)
                return same or (self.nonnegative(node.left, region, depth + 1) and self.nonnegative(node.right, region, depth + 1)) or \
                    (not isinstance(op, cst.Add) and self.nonpositive(node.left, region, depth + 1)
                     and self.nonpositive(node.right, region, depth + 1))
            if isinstance(op, cst.Subtract):
                return self._ascending_gaps(node, region, depth) or (
                    self.nonnegative(node.left, region, depth + 1) and self.nonpositive(node.right, region, depth + 1))
        if isinstance(node, (cst.List, cst.Tuple)):  # concat([a, b]): every element
            return bool(node.elements) and all(self.nonnegative(e.value, region, depth + 1) for e in node.elements)
        if isinstance(node, cst.Name):
            if region.env.get(node.value, PY) in (INT, PY) and heuristics.SIZE_NAME.search(node.value) and \
                    node.value not in region.assigned:
                return True  # a size or count parameter (dim, d_model, num_heads, length)
            return self._every_binding(node, region, self.nonnegative, depth)
        if isinstance(node, cst.Call):
            spec = specs.lookup(self.resolve(node.func))
            if spec is not None:
                if spec.range in (Range.NONNEGATIVE, Range.UNIT):
                    return True
                if spec.has(Kind.LOG) and not spec.has(Kind.LOG1P) and node.args:
                    value = number(node.args[0].value)
                    return value is not None and value >= 1
                if spec.range is Range.FOLLOWS and node.args:
                    return self.nonnegative(node.args[0].value, region, depth + 1)
                if spec.result is specs.Result.RANGE:
                    start = [a.value for a in node.args if a.keyword is None]
                    return len(start) <= 1 or (number(start[0]) is not None and number(start[0]) >= 0)
            if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("log",) and node.args:
                value = number(node.args[0].value)
                return value is not None and value >= 1
            if isinstance(node.func, cst.Name) and node.func.value in ("len", "abs"):
                return True
        if isinstance(node, cst.Subscript):
            return self.nonnegative(node.value, region, depth + 1)
        return False

    def _every_binding(self, name: cst.Name, region: Region, test, depth: int) -> bool:
        """``test`` holds of every binding of the local ``name`` (``dists = broadcast_to(...)``, then ``dists =
        concat([dists, ...])``, then ``dists = dists * norm(v)``). A binding that reads the name itself is checked
        assuming the name passes there: the first binding that runs cannot read it (a local, no parameter), so by
        induction each one passes. Augmented (``x -= v``), unpacked and loop bindings are not followed."""
        values = region.assigned.get(name.value, [])
        if len(values) == 1:
            return test(values[0], region, depth + 1)
        assumed: dict = self.__dict__.setdefault("_assumed_ranges", {})
        key = (id(region), name.value)
        if key in assumed:
            return assumed[key] == test.__name__  # only the same claim: ≥ 0 and ≤ 0 together would say = 0
        if not values or len(values) > _MAX_BINDINGS or any(id(v) in region.augmented for v in values) or \
                not self._plain_local(name.value, region):
            return False
        assumed[key] = test.__name__
        try:
            return all(test(v, region, depth + 1) for v in values)
        finally:
            del assumed[key]

    def _plain_local(self, name: str, region: Region) -> bool:
        """``name`` has no value before this function binds it: no parameter here or in an enclosing function whose
        table it reads through, no ``global`` statement."""
        scope: Region | None = region
        while scope is not None:
            if name in scope.param_dtypes or name in scope.iterated or name in scope.elements:
                return False
            if name in own(scope.assigned):
                break
            scope = scope.enclosing
        declared = self.__dict__.setdefault("_global_names", {})
        if id(region) not in declared:
            declared[id(region)] = (region, {n.name.value for g in walk(region.node) if isinstance(g, cst.Global)
                                              for n in g.names})
        return name not in declared[id(region)][1]

    def _ascending_gaps(self, node: cst.BinaryOperation, region: Region, depth: int) -> bool:
        """``m[k:] - m[:-k]`` or ``m[..., k:] - m[..., :-k]`` (k ≥ 1) of a name ``m`` that ascends along that axis:
        each element minus the one k before it, ≥ 0 (NeRF's ``dists = t[1:] - t[:-1]`` of sample depths)."""
        left, right = node.left, node.right
        if not (isinstance(left, cst.Subscript) and isinstance(right, cst.Subscript) and
                isinstance(left.value, cst.Name) and isinstance(right.value, cst.Name) and
                left.value.value == right.value.value):
            return False
        later, earlier = _last_slice(left), _last_slice(right)
        if later is None or earlier is None or later[0] != earlier[0]:
            return False
        shift = number(later[1].lower) if later[1].lower is not None else None
        back = number(earlier[1].upper) if earlier[1].upper is not None else None
        if later[1].upper is not None or earlier[1].lower is not None or shift is None or back is None or \
                shift < 1 or shift != int(shift) or back != -shift:
            return False
        order = self.ascending(left.value, region, depth + 1)
        return order is Ascends.ONE_D or (order is Ascends.LAST_AXIS and later[0])

    def ascending(self, node: cst.BaseExpression, region: Region, depth: int = 0) -> Ascends | None:
        """Along which axes ``node`` is non-decreasing by its form: ``linspace(a, b, n)`` with numbers a ≤ b and
        ``range(...)`` with a positive step are ascending 1-D sequences, ``sort(x)`` ascends along its last axis (the
        op table's ``Order``); an elementwise non-decreasing op (``Order.KEEPS``: cast, exp, relu), a number added or
        subtracted, a factor ≥ 0 or a divisor > 0 keep the order. None when unknown."""
        if depth > 8:
            return None
        if isinstance(node, cst.Name):
            values = region.assigned.get(node.value, [])
            return self.ascending(values[0], region, depth + 1) if len(values) == 1 and \
                node.value not in region.param_dtypes else None
        if isinstance(node, cst.BinaryOperation):
            return self._ascending_affine(node, region, depth)
        spec = specs.lookup(self.resolve(node.func)) if isinstance(node, cst.Call) else None
        if spec is None or spec.order is Order.NONE:
            return None
        if spec.order is Order.KEEPS:
            return self.ascending(first_arg(node), region, depth + 1) if first_arg(node) is not None else None
        if spec.order is Order.BOUNDS:
            start, stop = argument(node, "start", 0), argument(node, "stop", 1)
            low = self._number(start.value, region) if start is not None else None
            high = self._number(stop.value, region) if stop is not None else None
            return Ascends.ONE_D if low is not None and high is not None and low <= high else None
        if spec.order is Order.STEP:
            step = argument(node, "delta", 2) or argument(node, "step", 2)
            value = self._number(step.value, region) if step is not None else 1.0
            return Ascends.ONE_D if value is not None and value > 0 else None
        axis, direction = argument(node, "axis", 1), argument(node, "direction", 2)  # Order.SORTED
        if direction is not None and not (isinstance(direction.value, cst.SimpleString) and
                                          str(direction.value.evaluated_value).upper() == "ASCENDING"):
            return None
        return Ascends.LAST_AXIS if axis is None or number(axis.value) == -1 else None

    def _ascending_affine(self, node: cst.BinaryOperation, region: Region, depth: int) -> Ascends | None:
        """``m * c + b`` (c ≥ 0), ``m / c`` (c > 0), ``m - b``, ``b + m`` with numbers: the order of ``m``."""
        op, left, right = node.operator, node.left, node.right
        left_value, right_value = self._number(left, region), self._number(right, region)
        if isinstance(op, (cst.Add, cst.Multiply)) and left_value is not None:
            left, right, left_value, right_value = right, left, right_value, left_value  # the number on the right
        if right_value is None or left_value is not None:
            return None
        if isinstance(op, (cst.Add, cst.Subtract)) or (isinstance(op, cst.Multiply) and right_value >= 0) or \
                (isinstance(op, cst.Divide) and right_value > 0):
            return self.ascending(left, region, depth + 1)
        return None

    def _number(self, node: cst.BaseExpression, region: Region) -> float | None:
        """The number ``node`` stands for (``constant``), or a module name bound once, paired in a tuple of numbers
        (``NEAR, FAR = 2.0, 6.0``), that the function neither binds nor takes."""
        found = self.constant(node, region)
        if found is not None or not isinstance(node, cst.Name) or node.value in region.env or \
                region.assigned.get(node.value):
            return found[0] if found is not None else None
        table = self.__dict__.get("_paired_numbers")
        if table is None:
            counts: dict[str, int] = {}
            table = self.__dict__["_paired_numbers"] = {}
            for bound in walk(self.module):  # every binding anywhere (and `global`): a name bound twice is no constant
                targets = [g.name for g in bound.names] if isinstance(bound, cst.Global) else [bound.target] if \
                    isinstance(bound, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)) else []
                for leaf in (leaf for t in targets for leaf in walk(t) if isinstance(leaf, cst.Name)):
                    counts[leaf.value] = counts.get(leaf.value, 0) + (2 if isinstance(bound, cst.Global) else 1)
            for small in (s for stmt in self.module.body if isinstance(stmt, cst.SimpleStatementLine)
                          for s in stmt.body if isinstance(s, cst.Assign) and len(s.targets) == 1):
                names, values = small.targets[0].target, small.value
                if isinstance(names, cst.Tuple) and isinstance(values, cst.Tuple) and \
                        len(names.elements) == len(values.elements):
                    table.update({n.value.value: number(v.value) for n, v in zip(names.elements, values.elements)
                                  if isinstance(n.value, cst.Name) and counts.get(n.value.value) == 1})
        return table.get(node.value)


def _last_slice(node: cst.Subscript) -> tuple[bool, cst.Slice] | None:
    """``(True, s)`` for ``m[..., s]``, ``(False, s)`` for ``m[s]``, with ``s`` a slice; else None."""
    elements = [e.slice for e in node.slice]
    if not elements or not isinstance(elements[-1], cst.Slice) or elements[-1].step is not None:
        return None
    if len(elements) == 1:
        return False, elements[-1]
    lead = elements[0]
    if len(elements) == 2 and isinstance(lead, cst.Index) and isinstance(lead.value, cst.Ellipsis):
        return True, elements[-1]
    return None
