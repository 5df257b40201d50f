"""float16 facts and fix spellings shared by the float16 rules (MP201–MP207).

What dtype an expression holds is decided by the dtype facts (``facts.dtype_facts``, the one
view of the inference every float16 rule queries); this module holds what float16 does to a number and how a fix spells a
cast in the file it edits (``tf.cast`` where the file uses TensorFlow, ``keras.ops.cast`` in a
backend-agnostic Keras 3 module that never imports it).
"""

from __future__ import annotations

import struct

import libcst as cst

from mpfix.codemods.analysis.dtype_lattice import argument, first_arg, is_float_literal, number  # noqa: F401
from mpfix.codemods.analysis.dtypes import dtype_analysis  # noqa: F401  (model_outputs' view of the regions)
from mpfix.codemods.names import dotted_name

FLOAT16_MAX = 65504.0
FLOAT16_SMALLEST_NORMAL = 2.0 ** -14  # ≈ 6.1e-5
# A float16-safe additive mask: exp(-3e4) is 0 and two of them still sum below 65504.
SAFE_MASK = "3e4"
# A float16-safe epsilon: a normal float16 number (≥ 6.1e-5), so it neither vanishes nor
# makes x / eps overflow for |x| ≤ 6.5 (1e-8 becomes 0; 1e-7 a subnormal 1.19e-7).
SAFE_EPSILON = "1e-4"


def to_float16(value: float) -> float:
    """``value`` rounded to float16 exactly as TensorFlow converts a Python float (inf on overflow)."""
    try:
        return struct.unpack("<e", struct.pack("<e", value))[0]
    except OverflowError:
        # struct refuses values that round past 65504; IEEE round-to-nearest gives inf.
        return float("inf") if value > 0 else float("-inf")


def describe_float16(value: float) -> str:
    """What ``value`` becomes in float16, in words: ``0.0``, ``-inf``, ``a subnormal 1.19e-07``."""
    half = to_float16(value)
    if half == 0.0:
        return "0.0"
    if half in (float("inf"), float("-inf")):
        return "-inf" if half < 0 else "inf"
    if abs(half) < FLOAT16_SMALLEST_NORMAL:
        return f"a subnormal {half:.3g}"
    return f"{half:.5g}"


def epsilon_vanishes(value: float) -> bool:
    """True if a positive epsilon becomes 0 in float16, or a subnormal more than 10% off.

    1e-8 and 1e-12 become 0.0 (smallest subnormal ≈ 6e-8); 1e-7 becomes 1.19e-7 (19% off,
    and x / 1.19e-7 overflows for |x| > 0.008). 1e-6 is a subnormal within 1.3%, and
    1e-5/1e-6 layer-norm epsilons are common and harmless, so they are not flagged.
    """
    if not 0.0 < value < FLOAT16_SMALLEST_NORMAL:
        return False
    half = to_float16(value)
    return half == 0.0 or abs(half - value) / value > 0.10


def arithmetic_root(facts, node: cst.CSTNode) -> cst.CSTNode:
    """The outermost arithmetic expression ``node`` is part of (``scores + (1 - m) * -1e9``); ``facts``: ``DtypeFacts``."""
    current = node
    parent = facts.parent(current)
    while isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)) and not isinstance(
            getattr(parent, "operator", None), (cst.MatrixMultiply,)):
        current = parent
        parent = facts.parent(current)
    return current


def backend_agnostic(context) -> bool:
    """A Keras 3 module that uses ``keras.ops`` and never imports TensorFlow: fixes spell ``keras.ops``."""
    imports = context.imports
    return context.keras == 3 and not imports.imports_module("tensorflow") and (
        imports.imports_module("keras") or any(imports.local_name_for(name) is not None
                                               for name in ("keras.ops", "keras.src.ops")))


def tf_spelling(context) -> tuple[str, tuple[str, ...]]:
    """How the file spells the ``tensorflow`` module, and the import to add if it cannot."""
    local = context.imports.local_name_for("tensorflow")
    if local and "." not in local:
        return local, ()
    return "tf", ("import tensorflow as tf",)


def ops_spelling(context) -> tuple[str, tuple[str, ...]]:
    """How the file spells ``keras.ops``, and the import to add if it cannot."""
    for qualified in ("keras.ops", "keras.src.ops"):
        local = context.imports.local_name_for(qualified)
        if local:
            return local, ()
    local = context.imports.local_name_for("keras")
    if local and "." not in local:
        return f"{local}.ops", ()
    return "keras.ops", ("import keras",)


def cast_template(context, dtype: str) -> tuple[str, tuple[str, ...]]:
    """``tf.cast(__x__, tf.float32)`` or ``ops.cast(__x__, "float32")``; ``dtype`` is ``float32`` or an expression."""
    if backend_agnostic(context):
        ops, imports = ops_spelling(context)
        spelled = f'"{dtype}"' if dtype in ("float32", "float16") else dtype
        return f"{ops}.cast(__x__, {spelled})", imports
    tf, imports = tf_spelling(context)
    spelled = f"{tf}.{dtype}" if dtype in ("float32", "float16") else dtype
    return f"{tf}.cast(__x__, {spelled})", imports


def cast(context, node: cst.BaseExpression, dtype: str) -> tuple[cst.Call, tuple[str, ...]]:
    """``node`` cast to ``dtype`` in the file's own spelling, and the imports that needs."""
    text, imports = cast_template(context, dtype)
    template = cst.parse_expression(text)
    return template.with_changes(args=[template.args[0].with_changes(value=node), *template.args[1:]]), imports


def expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def is_simple(node: cst.BaseExpression) -> bool:
    """A name or attribute chain: repeating it (``x.dtype``) evaluates nothing twice."""
    return dotted_name(node) is not None
