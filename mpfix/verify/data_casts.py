"""``mpfix repair``'s edit for data the script casts to float16 itself: keep it float32.

A ``tf.data`` map that casts raw-unit values to float16 (``tf.cast(price, tf.float16)``) makes an
inf no policy undoes (the child reports such casts: ``_data_casts.py``). The edit writes float32
where the cast names float16, at one cast call of the line; the model's policy then casts the
inputs to its compute dtype itself (Keras's first layer autocasts float32 inputs), and a loss
reads float32 targets.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper

from mpfix.codemods.facts import ops
from mpfix.verify import cst_edits

# Calls that convert a tensor to the dtype they are given: the ops table's casts (``cast``, ``saturate_cast``, ``image.convert_image_dtype``): their dtype is the second
# positional argument or ``dtype=`` (``ops.Result.CAST``).
_CASTS = frozenset(spec.short for spec in ops.TABLE.values() if spec.is_cast)
_DTYPE_POSITION = 1
# Spellings of float16 as an attribute (tf.float16, tf.half, np.float16) or a string, and their float32.
_FLOAT16_NAMES = {"float16": "float32", "half": "float32"}
# Attribute names that spell a dtype (tf.dtypes' and NumPy's).
_DTYPE_NAMES = frozenset({"float16", "half", "bfloat16", "float32", "float64", "double", "int8", "int16", "int32",
                          "int64", "uint8", "uint16", "uint32", "uint64", "bool", "bool_", "complex64",
                          "complex128", "string", "float_", "int_"})


def _dtype_arg(call: cst.Call) -> cst.Arg | None:
    if cst_edits.call_name(call) not in _CASTS:
        return None
    position = _DTYPE_POSITION
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dtype":
            return arg
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[position] if len(positional) > position else None


def _float32_of(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """``value`` spelling float32 instead of float16 (None: it spells another dtype). A dtype the source does not
    spell (``tf.cast(window, COMPUTE_DTYPE)``, ``policy.compute_dtype``) is float16 where the child saw this line's
    cast make float16 (``_data_casts``, the only caller's evidence): it is written ``"float32"``, which every cast
    of the table takes (``tf.as_dtype`` reads the name)."""
    if isinstance(value, cst.Attribute) and value.attr.value in _FLOAT16_NAMES:
        return value.with_changes(attr=cst.Name(_FLOAT16_NAMES[value.attr.value]))
    if isinstance(value, cst.SimpleString) and value.evaluated_value in _FLOAT16_NAMES:
        quote = value.value[-1]
        return cst.SimpleString(f"{quote}{_FLOAT16_NAMES[value.evaluated_value]}{quote}")
    if _spells_a_dtype(value):
        return None
    return cst.SimpleString('"float32"')


def _spells_a_dtype(value: cst.BaseExpression) -> bool:
    """A literal dtype: a string, or an attribute named as one (``tf.float32``, ``np.int64``, ``tf.dtypes.half``)."""
    if isinstance(value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
        return True
    return isinstance(value, cst.Attribute) and value.attr.value in _DTYPE_NAMES


def sites(text: str, line: int) -> list[str]:
    """The code of each cast to float16 that starts on ``line``, in source order."""
    module = cst_edits.parsed(text)
    if module is None:
        return []
    try:
        module, found = _casts(module, line)
    except RecursionError:
        return []
    return [module.code_for_node(call) for call in found]


def _casts(module: cst.Module, line: int):
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = cst_edits.resolve_positions(wrapper)
    found = []

    class Find(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            arg = _dtype_arg(node)
            if arg is not None and positions[node].start.line == line and _float32_of(arg.value) is not None:
                found.append(node)

    wrapper.module.visit(Find())
    found.sort(key=lambda n: (positions[n].start.line, positions[n].start.column))
    return wrapper.module, found


def to_float32(text: str, line: int, site: int) -> str | None:
    """``text`` with the ``site``-th float16 cast of ``line`` casting to float32; None when it does not apply."""
    module = cst_edits.parsed(text)
    if module is None:
        return None
    try:
        module, found = _casts(module, line)
    except RecursionError:
        return None
    if site >= len(found):
        return None
    arg = _dtype_arg(found[site])
    replacement = _float32_of(arg.value)
    result = module.visit(cst_edits.Replace({arg.value: replacement})).code
    return result if result != text else None
