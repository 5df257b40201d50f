"""One dtype inference for the float16 rules (MP201–MP207): what dtype an expression holds.

Where float16 comes from: a layer's ``call`` under the mixed policy (Keras 3 autocasts every
floating tensor argument, tf_keras only the first; a layer built with ``autocast=False`` or a
preprocessing layer none), the layers and models it calls, what a model returns into a training
step or loss. Where float32 comes from: explicit dtypes and casts, the float32-creating ops of the
op table (``facts.ops``: ``tf.*`` and ``keras.ops.*`` alike), ``input_signature`` specs,
``self.dtype``/``variable_dtype``, layers built with ``dtype="float32"``, gradients, and —
outside a layer's ``call``, where TensorFlow never promotes — values that meet float32 in
arithmetic (code that runs proves them float32).

The analysis is per file and flow-insensitive within a function (a name's dtype joins all its
assignments; at call sites the last assignment before the call counts). It runs over *regions*
(``dtype_regions``), found once per file; everything else is computed on demand and memoized.
Split by job: ``dtype_lattice`` (the lattice, spellings), ``dtype_regions`` (regions, classes),
``dtype_env`` (names), ``dtype_infer`` (expressions), ``dtype_spelling`` (dtype spellings),
``dtype_calls`` (calls), ``dtype_ranges`` (value ranges). Rules never use this class: they query ``facts.dtype_facts.DtypeFacts``.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import nodes_by_type
from mpfix.codemods.analysis.dtype_calls import CallDtypes
from mpfix.codemods.analysis.dtype_classes import LayerClasses
from mpfix.codemods.analysis.dtype_env import NameDtypes
from mpfix.codemods.analysis.dtype_flow import FlowDtypes
from mpfix.codemods.analysis.dtype_infer import ExpressionDtypes
from mpfix.codemods.analysis.dtype_outputs import OutputProvenance
from mpfix.codemods.analysis.dtype_values import KnownValues
from mpfix.codemods.analysis.dtype_lattice import (  # noqa: F401  (the lattice, re-exported)
    BF16, BOOL, CPLX, F16, F32, F64, INT, PY, UNK, Dtype, argument, first_arg, is_float_literal, join, join_all,
    number, spelled_dtype, without_compat,
)
from mpfix.codemods.analysis.dtype_ranges import ValueRanges
from mpfix.codemods.analysis.dtype_regions import Region, RegionFinder, RegionKind  # noqa: F401
from mpfix.codemods.analysis.dtype_spelling import SpellingDtypes
from mpfix.codemods.analysis.dtype_syntax import Calls, imported_names
from mpfix.codemods.facts.heuristics import LOSS_NAME  # noqa: F401


class DtypeAnalysis(RegionFinder, LayerClasses, NameDtypes, ExpressionDtypes, SpellingDtypes, CallDtypes, ValueRanges,
                    FlowDtypes, OutputProvenance, KnownValues):
    """Regions of one module float16 can reach, with parent links and the dtype of expressions in them."""

    def __init__(self, module: cst.Module, resolve, index: dict[type, list[cst.CSTNode]] | None = None,
                 keras: int = 3, predictions: Dtype = UNK, project=None) -> None:
        self.module = module
        # Cross-file calls of this file's functions (``ProjectFileFacts.cross_calls``, via ``RuleContext.project``).
        self.cross_calls = tuple(getattr(project, "cross_calls", ()))
        self._project = project
        # What a loss's callers feed it as predictions where this file cannot see them (tf_keras hands a
        # compiled `fn(y_true, y_pred)` the model's outputs as they are): unknown, or the condition a rule
        # asks about (``DtypeFacts.dtype_of(node, predictions=F16)``); ``assumed_predictions`` says it mattered.
        self.predictions = predictions
        self.assumed_predictions = False
        self.index = index  # codemods._walk.nodes_by_type, shared with other analyses
        self.keras = keras
        self._resolve = resolve
        self.resolve = _memo_resolve(resolve)
        self.order: dict[cst.CSTNode, int] = {}  # source order of region nodes
        self.parent: dict[cst.CSTNode, cst.CSTNode] = {}
        self.region_of: dict[cst.CSTNode, Region] = {}
        self.guarded: set[cst.CSTNode] = set()
        self.regions: list[Region] = []
        self.module_constants: dict[str, cst.BaseExpression] = {}
        self.module_values: dict[str, list[cst.BaseExpression]] = {}  # top-level `name = value`s
        self.classes: dict[str, cst.ClassDef] = {}
        self.functions: dict[str, cst.FunctionDef] = {}
        self.methods: dict[cst.ClassDef, dict[str, cst.FunctionDef]] = {}
        self._float32_state: dict[cst.ClassDef, bool] = {}
        self._region_by_func: dict[cst.FunctionDef, Region] = {}
        self._attributes: dict[cst.ClassDef, dict[str, list[tuple[cst.FunctionDef, cst.BaseExpression]]]] = {}
        self._returns: dict[cst.FunctionDef, Dtype | None] = {}
        self._autocast: dict[cst.ClassDef, bool] = {}
        self._attribute_stack: set[tuple[cst.ClassDef, str]] = set()
        self._float32_layers: dict[cst.ClassDef, bool] = {}
        self._calls_by_name: dict[str, list[cst.Call]] | None = None
        self._closure_of: dict[cst.FunctionDef, cst.FunctionDef] = {}  # a nested function -> the one around it
        self._final = False
        self._codes: dict[int, tuple[cst.CSTNode, str]] = {}  # `code`: the node kept with its code (ids stay unique)
        # Names bound by imports (relative ones too): helpers from other files whose result
        # dtype this file cannot see.
        self.imported: set[str] = imported_names(module)
        self._find_regions()
        self._final = True  # names read flow-sensitively from now on (dtype_flow): what was memoized before is stale
        for region in self.regions:
            region.memo.clear()

    def under(self, predictions: Dtype) -> "DtypeAnalysis":
        """The same module analysed as if a loss's unseen callers fed it predictions of that dtype."""
        return DtypeAnalysis(self.module, self._resolve, self.index, keras=self.keras, predictions=predictions,
                             project=self._project)

    # -- regions -------------------------------------------------------------------

    # -- queries -------------------------------------------------------------------
    @property
    def all_calls(self) -> list[cst.Call]:
        """Every call in the module, regions or not (layers are built outside ``call``)."""
        if not hasattr(self, "_all_calls"):
            if self.index is not None:
                self._all_calls = self.index.get(cst.Call, [])
            else:
                collector = Calls(into_classes=True)
                collector.walk(self.module)
                self._all_calls = collector.calls
        return self._all_calls

    def code(self, node: cst.CSTNode) -> str:
        """``module.code_for_node(node)``, generated once per node (base classes and callees are spelled again and
        again while the regions are found)."""
        found = self._codes.get(id(node))
        if found is None or found[0] is not node:
            found = self._codes[id(node)] = (node, self.module.code_for_node(node))
        return found[1]

    def in_region(self, node: cst.CSTNode) -> Region | None:
        return self.region_of.get(node)

    def is_guarded(self, node: cst.CSTNode) -> bool:
        region = self.region_of.get(node)
        return node in self.guarded or bool(region and region.dtype_aware)

    def ancestors(self, node: cst.CSTNode):
        node = self.parent.get(node)
        while node is not None:
            yield node
            node = self.parent.get(node)


def _memo_resolve(resolve):
    """``without_compat(resolve(node))``, once per node: the inference resolves the same callees again and again
    (an import table's answer for a node never changes; the node is kept with it, so its id stays unique)."""
    found: dict[int, tuple[cst.CSTNode, str | None]] = {}

    def resolved(node: cst.CSTNode) -> str | None:
        entry = found.get(id(node))
        if entry is None or entry[0] is not node:
            entry = found[id(node)] = (node, without_compat(resolve(node)))
        return entry[1]

    return resolved


def dtype_analysis(context) -> DtypeAnalysis:
    """The module's analysis, computed once per file and shared by every float16 rule."""
    cached = context.cache.get("dtypes")
    if cached is None or cached.module is not context.module:
        cached = context.cache["dtypes"] = DtypeAnalysis(context.module, context.resolve, nodes_by_type(context),
                                                         keras=getattr(context, "keras", 3),
                                                         project=getattr(context, "project", None))
    return cached
