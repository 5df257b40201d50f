"""``DtypeFacts``: the float16 rules' one view of the dtype inference (MP201–MP207).

A rule asks what dtype a node holds (``dtype_of``), where it runs (``place``), which call made a
value float32 (``float32_source``), which operations mix float16 with float32 (``mixes``, also
used by fix validation), what a layer class does (``layer``), what constant a name stands for
(``constant``), whether a dtype test guards a node (``is_guarded``) and what range a value has
(``nonnegative``/``nonpositive``/``at_most_one``). No ``Region`` and no internal table of the
inference reaches a rule: the records here are frozen and typed.

Computed once per file (``dtype_facts(context)``) and shared by every rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from mpfix.codemods.analysis.dtype_regions import Region, RegionKind
from mpfix.codemods.analysis.dtype_tables import FLOAT32_VARIABLE
from mpfix.codemods.analysis.param_types_flow import accumulated_dtype, from_layer_params
from mpfix.codemods.analysis.dtype_syntax import walk_calls
from mpfix.codemods.analysis.dtypes import (
    F16, UNK, Dtype, DtypeAnalysis, argument, dtype_analysis, first_arg, spelled_dtype,
)
from mpfix.codemods.facts import ops as op_table
from mpfix.codemods.facts import keras_layers

_NOT_ARITHMETIC = (cst.BitAnd, cst.BitOr, cst.BitXor, cst.LeftShift, cst.RightShift,
                   cst.BitAndAssign, cst.BitOrAssign, cst.BitXorAssign, cst.LeftShiftAssign, cst.RightShiftAssign)


@dataclass(frozen=True)
class Place:
    """Where a node runs."""

    kind: RegionKind
    layer_method: bool  # a Keras layer's ``call`` or a method it calls: a float16/float32 mix raises there
    in_class: bool  # a method: ``self.compute_dtype`` is available
    function: cst.FunctionDef | None = field(repr=False)  # None at module level

    @property
    def compute(self) -> bool:
        """Code that runs on tensors (not module-level code)."""
        return self.kind is not RegionKind.MODULE


@dataclass(frozen=True)
class Provenance:
    """The call that makes a value float32: ``tf.cast(d, tf.float32)``, ``tf.ones(shape)``."""

    call: cst.Call
    dtype_arg: cst.Arg | None  # its dtype argument; None when the op's default makes it float32
    # A float16 value cast to float32 and then squared, summed, exponentiated…: a float32 upcast by
    # design (an RMSNorm's variance), which the compute dtype would make overflow again.
    deliberate: bool


@dataclass(frozen=True)
class Mix:
    """An operation inside a layer's call that mixes float16 with float32/float64 (TensorFlow raises):
    a binary operator, ``x op= y``, or a TF op whose operands must share a dtype (``tf.concat``)."""

    node: cst.BinaryOperation | cst.AugAssign | cst.Call
    float16: cst.BaseExpression  # the operand in the compute dtype
    wide: cst.BaseExpression  # the float32/float64 operand
    wide_dtype: Dtype
    text: str  # the operation's source
    wide_first: bool  # the float32 operand comes first
    # Outside a layer: the model/layer this file builds whose float16 output the float16 operand certainly is
    # computed from (``dtype_outputs``), met by a certainly float32 tensor (a training step, a loss).
    model: cst.BaseExpression | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        first, second = (self.wide_dtype, F16) if self.wide_first else (F16, self.wide_dtype)
        return f"`{self.text}` mixes {first.value} and {second.value}"


@dataclass(frozen=True)
class LayerInfo:
    """What a layer class does under a mixed policy."""

    autocasts: bool  # casts its floating inputs to the compute dtype
    computes_float32: bool  # computes in float32 whatever the policy (dtype="float32", or by design)
    accepts_dtype: bool  # its constructor takes ``dtype=``


@dataclass(frozen=True)
class Constant:
    """A number a node stands for, and the literal that spells it (to rewrite)."""

    value: float
    literal: cst.BaseExpression


class DtypeFacts:
    """The dtype facts of one module."""

    def __init__(self, analysis: DtypeAnalysis) -> None:
        self._a = analysis
        self.module = analysis.module
        self.keras = analysis.keras
        self._mixes: list[Mix] | None = None
        self._worlds: dict[Dtype, DtypeFacts] = {}  # these facts under a condition on loss predictions

    # -- where and what ------------------------------------------------------------------
    def _region(self, node: cst.CSTNode) -> Region | None:
        return self._a.region_of.get(node)

    def place(self, node: cst.CSTNode) -> Place | None:
        """Where ``node`` runs; None outside the code float16 can reach (class bodies, unreached functions)."""
        region = self._region(node)
        if region is None:
            return None
        return Place(RegionKind(region.kind), region.layer_method, region.in_class,
                     region.node if isinstance(region.node, cst.FunctionDef) else None)

    def assuming(self, predictions: Dtype) -> "DtypeFacts":
        """These facts if the predictions a loss function's unseen callers feed it were ``predictions``.

        tf_keras hands a compiled ``fn(y_true, y_pred)`` the model's outputs as they are (float32 behind a float32
        head, float16 without one, and y_true cast to them), so with no caller in its file a loss's inputs are
        unknown. A rule that reports "float16 when the model's predictions are float16" asks
        ``assuming(predictions=F16)``: the same file analysed under that condition (only files with such a loss;
        the same object otherwise).
        """
        a = self._a
        if predictions is a.predictions or not a.assumed_predictions:
            return self
        found = self._worlds.get(predictions)
        if found is None:
            found = self._worlds[predictions] = DtypeFacts(a.under(predictions))
        return found

    def dtype_of(self, node: cst.BaseExpression, predictions: Dtype | None = None) -> Dtype:
        """The dtype ``node`` holds under a float16 policy (unknown outside the analysed code); with
        ``predictions``, if a loss's unseen callers feed it predictions of that dtype (``assuming``)."""
        if predictions is not None:
            return self.assuming(predictions).dtype_of(node)
        region = self._region(node)
        return self._a.dtype(node, region) if region is not None else UNK

    def dtype_of_spelling(self, node: cst.BaseExpression, at: cst.CSTNode) -> Dtype:
        """What a dtype argument at ``at`` names: ``tf.float32``, ``x.dtype`` (x's dtype), ``self.compute_dtype``."""
        region = self._region(at)
        return self._a.dtype_of_spelling(node, region) if region is not None else UNK

    def nodes(self, types: type | tuple[type, ...], module_level: bool = False) -> Iterator[cst.CSTNode]:
        """Nodes of ``types`` in source order in the analysed code (module level too if asked)."""
        matches: dict[type, bool] = {}  # issubclass once per node type (LibCST's classes are ABCs: isinstance is slow)
        for node, region in list(self._a.region_of.items()):
            node_type = type(node)
            found = matches.get(node_type)
            if found is None:
                found = matches[node_type] = issubclass(node_type, types)
            if found and (module_level or region.kind != "module"):
                yield node

    def float16_nodes(self, types: type | tuple[type, ...]) -> Iterator[cst.CSTNode]:
        """Nodes of ``types`` whose value is float16 under the policy."""
        for node in self.nodes(types):
            if self.dtype_of(node) is F16:
                yield node

    @property
    def all_calls(self) -> list[cst.Call]:
        """Every call of the module, analysed code or not (layers are built outside ``call``)."""
        return self._a.all_calls

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._a.parent.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        return self._a.ancestors(node)

    def values_of(self, name: cst.Name, augmented: bool = True) -> list[cst.BaseExpression]:
        """The values bound to ``name`` in its function (``x += v`` counts unless ``augmented`` is False)."""
        region = self._region(name)
        if region is None:
            return []
        values = region.assigned.get(name.value, [])
        if not augmented:
            values = [v for v in values if id(v) not in region.augmented]
        return [v for v in values if type(v) is not cst.Name or not v.value.startswith("__")]

    def value_of(self, name: cst.Name) -> cst.BaseExpression | None:
        """The one value bound to ``name`` in its function (None when bound never or more than once)."""
        region = self._region(name)
        if region is None:
            return None
        values = region.assigned.get(name.value, [])
        return values[0] if len(values) == 1 and not (type(values[0]) is cst.Name and values[0].value.startswith("__")) \
            else None

    def unpacked_from(self, name: cst.Name) -> list[tuple[cst.BaseExpression, int]]:
        """``(source, index)`` for each ``a, b = source`` that binds ``name``."""
        region = self._region(name)
        return list(region.unpacked.get(name.value, ())) if region is not None else []

    def model_output(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """The model or layer this file builds whose float16 output ``node`` certainly is computed from
        (``dtype_outputs``): float16 by the layer table and the bindings, not by default."""
        region = self._region(node)
        return self._a.model_output(node, region) if region is not None else None

    def centred(self, node: cst.BaseExpression) -> bool:
        """``x - mean`` with ``mean`` a mean of ``x``: its square's mean is x's variance (``dtype_values``)."""
        region = self._region(node)
        return region is not None and self._a.centred(node, region)

    def initial_value(self, node: cst.BaseExpression) -> float | None:
        """The value the layer weight ``self.attr`` starts at (a constant initializer; ``dtype_values``)."""
        region = self._region(node)
        return self._a.initial_value(node, region) if region is not None else None

    def is_guarded(self, node: cst.CSTNode) -> bool:
        """Under a dtype test (``if x.dtype == tf.float16``), or in a function that tests for float16."""
        return self._a.is_guarded(node)

    def constant(self, node: cst.BaseExpression) -> Constant | None:
        """The number ``node`` stands for: a literal, a name bound once to one, a module constant, or
        ``self.attr`` bound to one (through a constructor default)."""
        found = self._a.constant(node, self._region(node))
        return Constant(*found) if found is not None else None

    def class_named(self, name: str) -> cst.ClassDef | None:
        return self._a.classes.get(name)

    # -- value ranges ------------------------------------------------------------------
    def nonpositive(self, node: cst.BaseExpression) -> bool:
        region = self._region(node)
        return region is not None and self._a.nonpositive(node, region)

    def nonnegative(self, node: cst.BaseExpression) -> bool:
        region = self._region(node)
        return region is not None and self._a.nonnegative(node, region)

    def at_most_one(self, node: cst.BaseExpression) -> bool:
        region = self._region(node)
        return region is not None and self._a.at_most_one(node, region)

    def probability(self, node: cst.BaseExpression) -> bool:
        """A softmax/sigmoid output (through names and shape ops): float16 rounds it to 0 below 6e-8."""
        region = self._region(node)
        return region is not None and self._a.probability(node, region)

    def unit_interval(self, node: cst.BaseExpression) -> bool:
        """``node`` in [0, 1] by its form: probabilities (ops, layers with a probability activation, a model's own
        predictions in its loss hook), ``1 - p``, products of such, clips into [0, 1]."""
        region = self._region(node)
        return region is not None and self._a.unit_interval(node, region)

    def bounded_above(self, node: cst.BaseExpression, bound: float) -> bool:
        """``node`` ≤ ``bound`` by its form (``clip_by_value(x, -10.0, 10.0)``, ``minimum(x, 5.0)``)."""
        region = self._region(node)
        if region is None:
            return False
        high = self._a.upper_bound(node, region)
        return high is not None and high <= bound

    # -- layers ------------------------------------------------------------------------
    def layer(self, cls: cst.ClassDef | str) -> LayerInfo | None:
        """What a layer class of this file (a ``ClassDef``) or of Keras (its qualified name) does.

        None for a class that is not a layer, or a name neither this file nor the Keras table knows.
        """
        if isinstance(cls, str):
            spec = keras_layers.layer(cls, self.keras)
            if spec is None:
                return None
            return LayerInfo(spec.autocasts, spec.computes_float32, True)
        if not self._a.is_layer_class(cls):
            return None
        computes_float32 = self._a.float32_layer(cls) or self._a.inherits_float32_compute(cls) or \
            _casts_to_float32(cls, self.module)
        return LayerInfo(self._a.autocasts(cls), computes_float32, _accepts_dtype(cls))

    def parameter_feeds_float32_layers(self, cls: cst.ClassDef, param: str) -> bool:
        """Every layer ``cls`` hands its constructor parameter ``param`` to computes in float32
        (``epsilon=self._norm_epsilon`` into Keras' LayerNormalization, or a layer built with
        ``dtype=tf.float32``): an epsilon there never meets float16 arithmetic."""
        a = self._a
        names = {param}
        attrs = {attr for attr, values in a.attribute_values_table(cls).items()
                 if any(isinstance(v, cst.Name) and v.value == param for _, v in values)}
        uses = []
        for func in a.methods.get(cls, {}).values():
            for call in walk_calls(func):
                for arg in call.args:
                    value = arg.value
                    if (isinstance(value, cst.Name) and value.value in names) or (
                            isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name)
                            and value.value.value == "self" and value.attr.value in attrs):
                        uses.append(call)
        if not uses:
            return False
        for call in uses:
            dtype = argument(call, "dtype", None)
            declared = spelled_dtype(dtype.value, a.resolve) if dtype is not None else None
            if not keras_layers.computes_float32(a.resolve(call.func), self.keras) and not (declared and declared.wide):
                return False
        return True

    # -- provenance and mixes ----------------------------------------------------------
    def float32_source(self, node: cst.BaseExpression) -> Provenance | None:
        """The call that makes ``node`` float32 (through names bound once, arithmetic and ops), or None."""
        region = self._region(node)
        return self._source(node, region, 0, False) if region is not None else None

    def _source(self, node: cst.BaseExpression, region: Region, depth: int, sensitive: bool) -> Provenance | None:
        if depth > 8:
            return None
        a = self._a
        if isinstance(node, cst.Name):
            # `eps = tf.cast(e, tf.float32)` … `eps += learned`: the assignment that made it float32.
            values = [v for v in region.assigned.get(node.value, []) if id(v) not in region.augmented]
            return self._source(values[0], region, depth + 1, sensitive) if len(values) == 1 else None
        if isinstance(node, cst.BinaryOperation):
            squares = isinstance(node.operator, cst.Power) or (
                isinstance(node.operator, cst.Multiply) and _same(self.module, node.left, node.right))
            for side in (node.left, node.right):
                if a.dtype(side, region).wide:
                    return self._source(side, region, depth + 1, sensitive or squares)
            return None
        if isinstance(node, cst.Subscript):
            return self._source(node.value, region, depth + 1, sensitive)
        if not isinstance(node, cst.Call):
            return None
        spec = op_table.lookup(a.resolve(node.func))
        if spec is None:
            return None
        if spec.is_cast:
            dtype = argument(node, "dtype", 1)
            if dtype is None:
                return None
            first = first_arg(node)
            deliberate = sensitive and first is not None and a.dtype(first, region) is F16
            return Provenance(node, dtype, deliberate)
        if spec.creates_float32 or spec.result is op_table.Result.LIKE:
            return Provenance(node, argument(node, "dtype", None), False)
        first = first_arg(node)
        if first is None:
            return None
        return self._source(first, region, depth + 1, sensitive or spec.has(*op_table.RANGE_SENSITIVE))

    def mixes(self) -> list[Mix]:
        """Every float16/float32 mix in a layer's ``call`` and the methods it calls (raises at run time), and in
        functions handed a Keras layer/model instance where the float16 side is its output (``param_types_flow``).

        Names are read flow-insensitively here (``dtype_insensitive``): a float32 known only where a name is read
        (``x = tf.cast(x, tf.float32)`` after float16 assignments) met float16 that rested on a guess (a sublayer
        inherited from another file, often a float32 LayerNormalization) in 3 tf-models layers: no certain mix.
        """
        if self._mixes is not None:
            return self._mixes
        a = self._a
        found: list[Mix] = []
        for node, region in list(a.region_of.items()):
            plain = not region.layer_method
            if plain and not region.layer_params:
                if region.kind != "module":
                    self._output_mix(node, region, found)
                continue
            node_type = type(node)
            operands = self._operands(node, region, _NOT_ARITHMETIC)
            if len(operands) < 2:
                continue
            dtypes = [a.dtype_insensitive(o, region) for o in operands]
            if plain:
                # A function handed a Keras instance (``param_types_flow``): float16 only from calling it; its
                # float32 accumulators read as on their first pass.
                dtypes = [accumulated_dtype(a, o, region, self._same_dtype_operands)
                          if d is UNK and type(o) is cst.Name else d for o, d in zip(operands, dtypes)]
                dtypes = [d if d is not F16 or from_layer_params(a, o, region) else UNK
                          for o, d in zip(operands, dtypes)]
            f16 = next((i for i, d in enumerate(dtypes) if d is F16), None)
            wide = next((i for i, d in enumerate(dtypes) if d.wide), None)
            if f16 is None or wide is None:
                continue
            text = self.module.code_for_node(node)
            found.append(Mix(node, operands[f16], operands[wide], dtypes[wide],
                             text.strip() if node_type is cst.AugAssign else text, wide < f16))
        self._mixes = found
        return found

    def _output_mix(self, node: cst.CSTNode, region: Region, found: list[Mix]) -> None:
        """Outside a layer (a training step, a loss): the float16 output of a model or layer this file builds
        (certain provenance, not a default) meets a certainly float32 tensor (a cast, a float32 creator, a
        variable): TensorFlow raises (TypeError). Neither side guessed, so neither is evidence about the other."""
        a = self._a
        node_type = type(node)
        # A comparison too (TensorFlow's need one dtype): a float32 input_signature parameter meeting the model's
        # scores in the tf.Module method that runs it (``signature_float32``: N22's class in one file).
        operands = self._operands(node, region, (*_NOT_ARITHMETIC, cst.Power))
        if len(operands) < 2:
            return
        dtypes = [a.dtype(o, region) for o in operands]
        f16 = next((i for i, d in enumerate(dtypes) if d is F16), None)
        wide = next((i for i, d in enumerate(dtypes) if d.wide), None)
        if f16 is None or wide is None:
            return
        model = a.model_output(operands[f16], region)
        if model is None or not self._certainly_float32(operands[wide], region, 0):
            return
        text = self.module.code_for_node(node)
        found.append(Mix(node, operands[f16], operands[wide], dtypes[wide],
                         text.strip() if node_type is cst.AugAssign else text, wide < f16, model))

    def _certainly_float32(self, node: cst.BaseExpression, region: Region, depth: int) -> bool:
        """Float32 by construction: a cast, a float32 creator (``float32_source``), or computed from float32
        variables (``for w in model.trainable_weights``, through dtype-preserving ops and arithmetic)."""
        a = self._a
        if isinstance(node, (cst.ListComp, cst.GeneratorExp)):
            return depth < 8 and self._certainly_float32(node.elt, region, depth + 1)
        if depth > 8 or not a.dtype(node, region).wide:
            return False
        if self._source(node, region, 0, False) is not None:
            return True
        if isinstance(node, cst.Name) and a.signature_float32(node.value, region):
            return True  # the function's own input_signature makes it float32
        if isinstance(node, cst.Name) and node.value in region.param_dtypes:  # what every call site passes
            return bool(a.passed_everywhere(node.value, region, lambda value, caller: a.plain_float32_variable(
                value, caller) or (caller.kind not in ("module", "shadow") and
                                   self._certainly_float32(value, caller, depth + 1))))
        if isinstance(node, cst.Name):
            values = region.assigned.get(node.value, [])
            return len(values) == 1 and (values[0] is FLOAT32_VARIABLE or
                                         self._certainly_float32(values[0], region, depth + 1))
        if isinstance(node, (cst.Subscript, cst.UnaryOperation)):
            return self._certainly_float32(node.value if isinstance(node, cst.Subscript) else node.expression,
                                           region, depth + 1)
        if isinstance(node, cst.BinaryOperation):
            return any(self._certainly_float32(side, region, depth + 1) for side in (node.left, node.right))
        if isinstance(node, cst.Call) and (self._keras_built_here(node.func, region) or
                                           a.own_call_float32(node, region)):
            return True  # a model calling itself, or a model/layer built here: float32 by its own layers' dtypes
        if isinstance(node, cst.Call):
            resolved = a.resolve(node.func) or ""
            dtype = argument(node, "dtype", None)
            if dtype is not None and resolved.startswith(("tensorflow.", "keras.")):
                # tf.sequence_mask(lengths, n, dtype=tf.float32): an op told to make float32 makes float32.
                return (spelled_dtype(dtype.value, a.resolve) or UNK).wide
            spec = op_table.lookup(resolved)
            first = first_arg(node)
            if spec is None or spec.result is not op_table.Result.PRESERVES or first is None:
                return False
            if isinstance(first, (cst.List, cst.Tuple)):
                return bool(first.elements) and all(self._certainly_float32(e.value, region, depth + 1)
                                                    for e in first.elements)
            return self._certainly_float32(first, region, depth + 1)
        return False

    def _keras_built_here(self, func: cst.BaseExpression, region: Region) -> bool:
        """``func`` is a name bound once (here, in an enclosing function or at module level) to a Keras model or layer
        construction of this file (``keras.Sequential([...])``, ``keras.Model(i, o)``, ``keras.layers.Dense(...)``)."""
        a, outer, values = self._a, region, []
        while isinstance(func, cst.Name) and outer is not None and not values:
            values = outer.assigned.get(func.value, []) if func.value not in outer.param_dtypes else []
            outer = outer.enclosing
        values = values or (a.module_values.get(func.value, []) if isinstance(func, cst.Name) else [])
        return len(values) == 1 and isinstance(values[0], cst.Call) and (a.resolve(values[0].func) or "").startswith(
            ("keras.Sequential", "keras.Model", "keras.models.", "keras.layers."))

    def _operands(self, node: cst.CSTNode, region: Region, binary_excluded: tuple) -> list[cst.BaseExpression]:
        """The operands of ``node`` that must share one dtype: a binary operation's (not ``binary_excluded``, not a
        Keras 3 variable's, whose operators promote), an augmented assignment's, a same-dtype op's, a comparison's."""
        node_type = type(node)
        if node_type is cst.BinaryOperation:
            excluded = isinstance(node.operator, binary_excluded) or self._variable_promotes(node, region)
            return [] if excluded else [node.left, node.right]
        if node_type is cst.AugAssign:
            return [] if isinstance(node.operator, _NOT_ARITHMETIC) else [node.target, node.value]
        if node_type is cst.Call:
            return self._same_dtype_operands(node)
        if node_type is cst.Comparison:
            operands = _compared(node)
            # a Keras 3 variable's comparison operators are keras.ops: they promote
            return [] if self.keras == 3 and any(self._a.keras_variable(o, region) for o in operands) else operands
        return []

    def _variable_promotes(self, node: cst.BinaryOperation, region: Region) -> bool:
        """``x * self.w`` / ``self.w + x`` on a Keras 3 ``add_weight`` variable: no mix (keras_layers table)."""
        table = keras_layers.VARIABLE_OPERATORS_PROMOTE.get(self.keras)
        operator = type(node.operator).__name__
        return table is not None and (
            operator in table["left"] and self._a.keras_variable(node.left, region) or
            operator in table["right"] and self._a.keras_variable(node.right, region))

    def _same_dtype_operands(self, call: cst.Call) -> list[cst.BaseExpression]:
        """The operands a TensorFlow op needs in one dtype: ``tf.concat([a, b])``'s elements, ``tf.add(a, b)``."""
        resolved = self._a.resolve(call.func) or ""
        spec = op_table.lookup(resolved)
        if spec is None or not spec.same_dtype or not op_table.refuses_mixed(resolved):
            return []  # keras.ops promote to a common dtype
        positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
        if spec.tensor_list:
            first = positional[0] if positional else None
            if isinstance(first, (cst.List, cst.Tuple)):
                return [e.value for e in first.elements if not isinstance(e, cst.StarredElement)]
            return []
        return [positional[i] for i in spec.dtype_args if i < len(positional)]


_TENSOR_COMPARISONS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual, cst.Equal, cst.NotEqual)


def _compared(node: cst.Comparison) -> list[cst.BaseExpression]:
    """``x >= t``: its two operands (TensorFlow's comparison operators need one dtype); a chain or ``is``/``in``: none."""
    if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, _TENSOR_COMPARISONS):
        return []
    return [node.left, node.comparisons[0].comparator]


def _same(module: cst.Module, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    return module.code_for_node(a) == module.code_for_node(b)


def _casts_to_float32(cls: cst.ClassDef, module: cst.Module) -> bool:
    """The class's ``call`` casts its input to float32 itself (``tf.cast(x, tf.float32)``)."""
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "call":
            return "float32" in module.code_for_node(stmt)
    return False


def _accepts_dtype(cls: cst.ClassDef) -> bool:
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "__init__":
            params = stmt.params
            return isinstance(params.star_kwarg, cst.Param) or any(
                p.name.value == "dtype" for p in [*params.params, *params.kwonly_params])
    return True  # inherits Layer.__init__, which takes dtype


def dtype_facts(context) -> DtypeFacts:
    """The module's dtype facts, computed once per file and shared by every float16 rule."""
    cached = context.cache.get("dtype_facts")
    analysis = dtype_analysis(context)
    if cached is None or cached._a is not analysis:
        cached = context.cache["dtype_facts"] = DtypeFacts(analysis)
    return cached


def facts_for(module: cst.Module, keras: int = 3) -> DtypeFacts:
    """The dtype facts of a module outside a rule run (fix validation, benchmarks, tests)."""
    from mpfix.codemods.names import ImportTable

    return DtypeFacts(DtypeAnalysis(module, ImportTable(module).resolve, None, keras=keras))


def new_mixes(original: cst.Module, fixed: cst.Module, keras: int = 3) -> list[Mix]:
    """The mixes ``fixed`` has that ``original`` did not (a fix that would raise at run time).

    Compared by the operation's source text, as a multiset: a fix that turns an existing mix
    into another one still counts as new.
    """
    remaining = [str(m) for m in facts_for(original, keras).mixes()]
    new = []
    for mix in facts_for(fixed, keras).mixes():
        if str(mix) in remaining:
            remaining.remove(str(mix))
        else:
            new.append(mix)
    return new



def dtypes_by_line(source: str, keras: int = 3) -> dict[int, list[tuple[str, Dtype]]]:
    """Every analysed call and binary operation of ``source`` by its first line: ``(source text, dtype)``.

    For comparing the facts with the dtypes TensorFlow traces at a source line
    (``benchmarks/dtype_agreement``); positions cost a full LibCST metadata pass, so rules never call this.
    """
    from libcst.metadata import MetadataWrapper, PositionProvider

    from mpfix.parsing import parse_module  # depth pre-check: LibCST's parser can crash on hostile text

    wrapper = MetadataWrapper(parse_module(source), unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    facts = facts_for(wrapper.module, keras)
    found: dict[int, list[tuple[str, Dtype]]] = {}
    for node in facts.nodes((cst.Call, cst.BinaryOperation)):
        line = positions[node].start.line
        found.setdefault(line, []).append((facts.module.code_for_node(node), facts.dtype_of(node)))
    return found
