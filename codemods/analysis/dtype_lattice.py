"""The dtype lattice of the float16 analysis, and how source spells dtypes and numbers.

``FLOAT16`` follows the policy's compute dtype (float16 under ``mixed_float16``); ``PYTHON`` is a
Python number or string, converted to whatever it meets; ``UNKNOWN`` never flags on its own.
"""

from __future__ import annotations

import re
from enum import Enum

import libcst as cst

from mpfix.codemods.names import dotted_name


class Dtype(Enum):
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    COMPLEX = "complex"
    INT = "int"
    BOOL = "bool"
    PYTHON = "python"
    UNKNOWN = "unknown"

    @property
    def wide(self) -> bool:
        """float32 or float64: holds 1e9 and 1e-12, but mixing it with float16 is an error."""
        return self in (Dtype.FLOAT32, Dtype.FLOAT64)

    @property
    def floating_tensor(self) -> bool:
        return self in (Dtype.FLOAT16, Dtype.BFLOAT16, Dtype.FLOAT32, Dtype.FLOAT64)


F16, BF16, F32, F64 = Dtype.FLOAT16, Dtype.BFLOAT16, Dtype.FLOAT32, Dtype.FLOAT64
CPLX, INT, BOOL, PY, UNK = Dtype.COMPLEX, Dtype.INT, Dtype.BOOL, Dtype.PYTHON, Dtype.UNKNOWN

_NAMED = {
    "float16": F16, "half": F16, "bfloat16": BF16, "float32": F32, "float": F32, "single": F32,
    "float64": F64, "double": F64, "complex64": CPLX, "complex128": CPLX, "complex": CPLX,
    "bool": BOOL, "bool_": BOOL,
}
_INT_NAME = re.compile(r"^u?int(8|16|32|64)?$|^long$")
BITWISE = (cst.BitAnd, cst.BitOr, cst.BitXor)
# Python builtins that return Python numbers (`len(x)`, `float(d)`): never tensors.
PYTHON_FUNCS = frozenset({"len", "int", "float", "round", "abs", "sum", "min", "max", "range", "pow", "divmod", "bool",
                          "str"})


def spelled_dtype(node: cst.BaseExpression, resolve) -> Dtype | None:
    """The dtype a dtype *spelling* names (``tf.float32``, ``"float32"``, ``np.int32``, ``floatx()``).

    None for spellings that are not literal (``x.dtype``, ``self.compute_dtype``): the inference
    resolves those itself.
    """
    if isinstance(node, cst.SimpleString):
        text = (node.evaluated_value or "")
        if text.startswith("mixed_"):
            return F16 if "float16" in text else BF16
        return _NAMED.get(text, INT if _INT_NAME.match(text) else None)
    if isinstance(node, cst.Call):
        name = dotted_name(node.func) or ""
        if name.endswith("floatx"):
            return F32  # keras.backend.floatx(): float32 whatever the mixed policy
        if name.endswith(("as_dtype", "DType", "dtype")) and node.args:
            return spelled_dtype(node.args[0].value, resolve)
        return None
    if isinstance(node, cst.Name):
        if node.value in ("float", "complex", "bool"):
            return _NAMED[node.value]
        if node.value == "int":
            return INT
    dotted = without_compat(resolve(node)) or dotted_name(node) or ""
    if dotted.startswith(("tensorflow.", "numpy.", "jax.numpy.", "torch.", "keras.")) or \
            dotted.split(".")[0] in ("tf", "np", "jnp", "torch"):
        last = dotted.split(".")[-1]
        if last in _NAMED:
            return _NAMED[last]
        if _INT_NAME.match(last):
            return INT
    return None


def number(node: cst.BaseExpression) -> float | None:
    """The value of a numeric literal (with unary minus), ``float("inf")``, ``np.inf`` … or None."""
    # Exact type tests (LibCST's node classes are ABCs: isinstance costs a Python call; these leaf classes have no
    # subclasses): the inference asks this of nearly every expression.
    sign = 1.0
    node_type = type(node)
    while node_type is cst.UnaryOperation and type(node.operator) in _SIGNS:
        if type(node.operator) is cst.Minus:
            sign = -sign
        node = node.expression
        node_type = type(node)
    if node_type is cst.Float or node_type is cst.Integer:
        try:
            return sign * float(node.evaluated_value)
        except (ValueError, OverflowError):
            return None
    if node_type is cst.Name or node_type is cst.SimpleString:
        return None
    if node_type is cst.Call and type(node.func) is cst.Name and node.func.value == "float" \
            and len(node.args) == 1 and type(node.args[0].value) is cst.SimpleString:
        text = (node.args[0].value.evaluated_value or "").strip().lower()
        if text in ("inf", "+inf", "-inf", "infinity", "-infinity"):
            return sign * float(text)
        return None
    dotted = dotted_name(node) if node_type is cst.Attribute else None
    if dotted and dotted.split(".")[-1] == "inf" and dotted.split(".")[0] in ("np", "numpy", "math", "jnp"):
        return sign * float("inf")
    if dotted and re.search(r"float(32|64)\.(min|max)$", dotted):
        return sign * (-3.4e38 if dotted.endswith("min") else 3.4e38)
    return None


_SIGNS = (cst.Minus, cst.Plus)


def is_float_literal(node: cst.BaseExpression) -> bool:
    """Float literals and infinities; integers are index arithmetic far more often than masks."""
    while isinstance(node, cst.UnaryOperation):
        node = node.expression
    return not isinstance(node, cst.Integer) and number(node) is not None


def join(a: Dtype, b: Dtype) -> Dtype:
    """The dtype of ``a op b`` where a mix is allowed to stand (inside a layer: MP206's ground)."""
    if a is b:
        return a
    if a is PY:
        return b
    if b is PY:
        return a
    if CPLX in (a, b):
        return CPLX
    if F16 in (a, b):
        return F16
    if BF16 in (a, b):
        return BF16
    if UNK in (a, b):
        return UNK
    if F64 in (a, b):
        return F64
    if F32 in (a, b):
        return F32
    if INT in (a, b):
        return INT
    return BOOL


def join_all(dtypes) -> Dtype:
    result = None
    for d in dtypes:
        result = d if result is None else join(result, d)
    return UNK if result is None else result


def arith(a: Dtype, b: Dtype, strict: bool) -> Dtype:
    """``a op b`` outside a layer (``strict``): float16 meeting float32 only runs if it is float32."""
    if strict and {a, b} in ({F16, F32}, {F16, F64}):
        return a if a.wide else b
    if strict and UNK in (a, b) and (a.wide or b.wide):
        return a if a.wide else b  # float32 op unknown: the unknown is a Python number or float32 too
    return join(a, b)


def argument(call: cst.Call, keyword: str, position: int | None) -> cst.Arg | None:
    for i, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
        if position is not None and arg.keyword is None and arg.star == "" and i == position:
            return arg
    return None


def first_arg(call: cst.Call) -> cst.BaseExpression | None:
    return call.args[0].value if call.args and call.args[0].keyword is None and not call.args[0].star else None


def all_integers(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.UnaryOperation):
        return all_integers(node.expression)
    if isinstance(node, (cst.List, cst.Tuple)):
        return all(all_integers(e.value) for e in node.elements)
    return False


def without_compat(name: str | None) -> str | None:
    """``tensorflow.compat.v1.float32`` is ``tensorflow.float32`` (``import tensorflow.compat.v1 as tf``)."""
    if name and name.startswith(("tensorflow.compat.v1.", "tensorflow.compat.v2.")):
        return "tensorflow." + name[len("tensorflow.compat.v1."):]
    return name


def comparison_parts(node):
    if isinstance(node, cst.Comparison):
        return [node.left, *[c.comparator for c in node.comparisons]]
    return [node.left, node.right]
