"""Static side of the dtype agreement benchmark: the facts mpfix's rules read, at the traced lines.

``facts_for`` is the one adapter onto mpfix's dtype model (the facts layer's ``DtypeFacts`` when it
is there, else ``codemods/analysis/dtypes.py``'s ``DtypeAnalysis``): switching models is one line.
``match`` pairs the runtime records of one source line with the expressions the rules read at that
line (binary operations and calls), by op class, in evaluation order.
"""

from __future__ import annotations

import builtins
import collections
import math
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

# -- op classes ------------------------------------------------------------------------------
# Binary operators -> (class, TensorFlow op types).
BINOP = {
    cst.Add: ("add/sub", {"AddV2", "Add", "BiasAdd"}), cst.Subtract: ("add/sub", {"Sub"}),
    cst.Multiply: ("mul/div", {"Mul"}), cst.Divide: ("mul/div", {"RealDiv", "Div", "DivNoNan"}),
    cst.FloorDivide: ("mul/div", {"FloorDiv"}), cst.Modulo: ("mul/div", {"FloorMod"}),
    cst.Power: ("square/pow", {"Pow", "Square"}),
    cst.MatrixMultiply: ("matmul", {"MatMul", "BatchMatMulV2", "BatchMatMulV3"}),
}
# Callee names (last dotted part) -> (class, TensorFlow op types its result comes from).
_CALLS = {
    "creates float32": ({"constant", "zeros", "ones", "fill", "eye", "range", "arange", "linspace", "uniform",
                         "normal", "truncated_normal", "zeros_like", "ones_like", "full", "full_like"},
                        {"Const", "Fill", "Range", "LinSpace", "RandomUniform", "RandomStandardNormal",
                         "TruncatedNormal", "ZerosLike", "OnesLike", "Identity", "Add", "AddV2", "Mul", "MatrixDiag",
                         "StatelessRandomUniformV2", "StatelessRandomNormalV2", "BroadcastTo", "Cast"}),
    "square/pow": ({"square", "pow", "power"}, {"Square", "Pow"}),
    "exp family": ({"exp", "log", "log1p", "expm1", "softplus", "sigmoid", "tanh", "softmax", "log_softmax",
                    "logsumexp", "reduce_logsumexp", "gelu", "silu", "swish", "elu", "selu", "erf"},
                   {"Exp", "Log", "Log1p", "Expm1", "Softplus", "Sigmoid", "Tanh", "Softmax", "LogSoftmax",
                    "Erf", "Elu", "Selu", "Mul", "AddV2"}),
    "norm/sqrt": ({"sqrt", "rsqrt", "norm", "l2_normalize", "normalize", "reciprocal"},
                  {"Sqrt", "Rsqrt", "Mul", "Reciprocal", "RealDiv"}),
    "matmul": ({"matmul", "einsum", "dot", "tensordot", "batch_matmul"},
               {"MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "Reshape", "Transpose"}),
    "reductions": ({"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "sum", "mean", "max",
                    "min", "prod", "cumsum", "cumprod", "reduce_variance", "reduce_std", "var", "std", "moments"},
                   {"Sum", "Mean", "Max", "Min", "Prod", "Cumsum", "Cumprod", "Sqrt", "Squeeze"}),
    "casts": ({"cast", "saturate_cast", "convert_to_tensor", "astype"}, {"Cast", "Const", "Identity"}),
    "elementwise": ({"add", "subtract", "multiply", "divide", "maximum", "minimum", "abs", "negative", "where",
                     "clip_by_value", "clip", "relu", "relu6", "square_difference", "squared_difference",
                     "divide_no_nan", "truediv"},
                    {"AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Abs", "Neg", "SelectV2", "Relu",
                     "Relu6", "ClipByValue", "SquaredDifference", "DivNoNan"}),
    "conv/pool": ({"conv", "conv1d", "conv2d", "conv3d", "depthwise_conv", "depthwise_conv2d", "separable_conv",
                   "avg_pool", "max_pool", "average_pool", "bias_add"},
                  {"Conv2D", "Conv3D", "DepthwiseConv2dNative", "AvgPool", "MaxPool", "BiasAdd", "Squeeze"}),
}
CALL = {name: (klass, op_types) for klass, (names, op_types) in _CALLS.items() for name in names}

RUNTIME = {"float16": "float16", "float32": "float32", "float64": "float64", "bfloat16": "bfloat16",
           "bool": "bool", "complex64": "complex", "complex128": "complex"}


def runtime_dtype(name: str) -> str | None:
    """mpfix's Dtype value for a TensorFlow dtype name; None for resources, strings, variants."""
    if name in RUNTIME:
        return RUNTIME[name]
    if name.startswith(("int", "uint")):
        return "int"
    return None


# -- the adapter onto mpfix's dtype model -----------------------------------------------------
def facts_for(module: cst.Module, keras: int):
    """``(dtype_of, in_float16_code)`` of ``module``: the one place that knows mpfix's API."""
    try:
        from mpfix.codemods.facts.dtype_facts import facts_for as new_facts
    except ImportError:
        new_facts = None
    if new_facts is not None:
        facts = new_facts(module, keras=keras)
        return (lambda node: facts.dtype_of(node).value), (lambda node: facts.place(node) is not None)
    from mpfix.codemods.analysis.dtypes import DtypeAnalysis
    from mpfix.codemods.names import ImportTable

    analysis = DtypeAnalysis(module, ImportTable(module).resolve, None, keras=keras)

    def dtype_of(node):
        region = analysis.region_of.get(node)
        return analysis.dtype(node, region).value if region is not None else "unknown"

    return dtype_of, (lambda node: node in analysis.region_of)


# -- expressions at lines -----------------------------------------------------------------------
@dataclass
class Expr:
    node: cst.BaseExpression
    klass: str
    callee: str | None  # None for a binary operation
    order: int  # evaluation (post-)order in the module
    text: str


def _callee(node: cst.Call) -> str | None:
    func = node.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return None


class _Exprs(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.by_line: dict[int, list[Expr]] = collections.defaultdict(list)
        self.order = 0

    def _add(self, node, klass, callee) -> None:
        self.order += 1
        line = self.get_metadata(PositionProvider, node).start.line
        text = " ".join(self.module.code_for_node(node).split())[:100]
        self.by_line[line].append(Expr(node, klass, callee, self.order, text))

    def leave_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        entry = BINOP.get(type(node.operator))
        self._add(node, entry[0] if entry else "other binary", None)

    def leave_Call(self, node: cst.Call) -> None:
        name = _callee(node)
        if name in CALL:
            klass = CALL[name][0]
        elif isinstance(node.func, cst.Call) or (isinstance(node.func, cst.Attribute) and isinstance(
                node.func.value, cst.Name) and node.func.value.value == "self" and not name.startswith("_")):
            klass = "layer calls"  # `Dense(4)(x)`, `self.dense(x)`
        else:
            klass = "other calls"
        self._add(node, klass, name or "")


# Functions that stand between a call site and the function it names (TensorFlow's dispatch and
# traceback wrappers, Keras' __call__): a return from one of them is the named call's value.
CALL_WRAPPERS = {"op_dispatch_handler", "wrapper", "error_handler", "__call__", "_wrapper", "new_func",
                 "wrapped", "inner", "decorated", "_method_wrapper", "func_with_kwargs", "call",
                 "converted_call"}  # autograph's call of a function inside tf.function
BINOP_FUNCS = {"binary_op_wrapper", "r_binary_op_wrapper", "error_handler"}
NOT_BINOPS = {"__getitem__", "__init__", "__iter__", "__next__", "__len__", "__bool__", "__call__",
              "__getattr__", "__getattribute__", "__enter__", "__exit__", "__new__"}


# Callables implemented in C: calling one makes no Python-level return (outside autograph, which
# calls everything through converted_call).
C_CALLABLES = frozenset(n for n in dir(builtins) if not n.startswith("_")) | frozenset(dir(math))


def compatible(expr: Expr, function: str) -> bool:
    """Could a return from ``function``, called directly by the line, be ``expr``'s value?"""
    if expr.callee is None:
        return function in BINOP_FUNCS or (function.startswith("__") and function.endswith("__")
                                           and function not in NOT_BINOPS)
    if function == "converted_call":
        return True
    if expr.callee in C_CALLABLES:
        return False
    if expr.callee[:1].isupper():  # a class: the value is the instance (__init__ returns None)
        return function in (expr.callee, "__init__", "__new__")
    return function == expr.callee or function in CALL_WRAPPERS


def align(exprs: list[Expr], events: list[dict]) -> dict[int, list[dict]]:
    """Expression index -> the return events that are its values.

    Calls and operators return in evaluation (post-)order, once per execution of the line, so
    each event goes to the next expression in that order (cyclically) that it is compatible with.
    """
    dealt: dict[int, list[dict]] = collections.defaultdict(list)
    if not exprs:
        return dealt
    at = 0
    for event in events:
        for step in range(len(exprs)):
            i = (at + step) % len(exprs)
            if compatible(exprs[i], event["op"]):
                dealt[i].append(event)
                at = (i + 1) % len(exprs)
                break
    return dealt


@dataclass
class Pair:
    """One expression and the dtypes TensorFlow gave it (every execution of the line)."""

    file: str
    line: int
    klass: str
    text: str
    static: str
    in_region: bool
    runtime: frozenset[str]


def pair_file(path: str, records: list[dict], keras: int, stats: collections.Counter) -> list[Pair]:
    """Pairs of one source file: the values its lines returned, matched with its expressions."""
    events = [r for r in records if r["kind"] == "ret"]  # dtype "" for non-tensor values (kept for the order)
    # A layer instance built with a float32 (or float64) dtype runs the same source in that dtype:
    # the facts answer for the mixed policy, so those executions are counted apart.
    wide = [r for r in events if r.get("compute") in ("float32", "float64")]
    stats["values in float32-dtype layer instances"] += len(wide)
    events = [r for r in events if r.get("compute") not in ("float32", "float64")]
    stats["ops at studied lines"] += sum(r["kind"] == "op" for r in records)
    try:
        source = open(path, encoding="utf-8").read()
        module = cst.parse_module(source)
    except Exception:  # noqa: BLE001 - an unreadable file counts as unmatched
        stats["values in unparsable files"] += len(events)
        return []
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    collector = _Exprs(module)
    wrapper.visit(collector)
    dtype_of, in_region = facts_for(module, keras)
    by_line: dict[int, list[dict]] = collections.defaultdict(list)
    for rec in events:
        by_line[rec["line"]].append(rec)
    pairs = []
    for line, recs in by_line.items():
        recs.sort(key=lambda r: r["seq"])
        # Arithmetic the facts call Python numbers makes no TensorFlow call: it cannot take a value.
        exprs = sorted((e for e in collector.by_line.get(line, [])
                        if not (e.callee is None and dtype_of(e.node) == "python")), key=lambda e: e.order)
        dealt = align(exprs, recs)
        tensors = sum(bool(runtime_dtype(r["dtype"])) for r in recs)
        matched = sum(bool(runtime_dtype(r["dtype"])) for v in dealt.values() for r in v)
        stats["values matched"] += matched
        stats["values unmatched"] += tensors - matched
        for i, got in dealt.items():
            got = [r for r in got if runtime_dtype(r["dtype"])]
            if not got:
                continue  # the expression's value is not a tensor (a list, a layer, None)
            e = exprs[i]
            pairs.append(Pair(path, line, e.klass, e.text, dtype_of(e.node), in_region(e.node),
                              frozenset(runtime_dtype(r["dtype"]) for r in got)))
    return pairs


def verdict(pair: Pair) -> str:
    """agree / unknown / wrong / outside (not in code the float16 rules analyse)."""
    if not pair.in_region:
        return "outside"
    if pair.static in ("unknown", "python"):
        return "unknown"
    return "agree" if pair.static in pair.runtime else "wrong"
