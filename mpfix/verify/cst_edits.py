"""LibCST helpers shared by ``mpfix repair``'s source edits (``islands.py``, ``mix_crash.py``).

How a call or operator is spelled, how this module writes a cast (``tf.cast`` or ``keras.ops.cast``),
whether a node sits in a layer's method, one node-for-node replacement, and a parse that answers
None instead of raising on text LibCST cannot (or must not) parse.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from mpfix.codemods.names import ImportTable
from mpfix.parsing import parse_module


def call_name(node) -> str | None:
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute):
            return func.attr.value
        if isinstance(func, cst.Name):
            return func.value
    return None


OPERATORS = {
    cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.Divide: "/", cst.Power: "**", cst.MatrixMultiply: "@",
}


def spelling(node) -> str | None:
    if isinstance(node, cst.BinaryOperation):
        return OPERATORS.get(type(node.operator))
    return call_name(node)


class CastStyle:
    """How this module writes a cast, from the names its imports bind (not from its text):
    ``<tf>.cast(x, <tf>.float32)`` where it imports TensorFlow, else ``<ops>.cast(x, "float32")``
    where it binds Keras 3's ops (``from keras import layers, ops``, ``import keras``,
    ``import keras.ops as K``). A module that binds neither gets ``tf.cast``, which the fix
    validation then rejects (an undefined name) rather than this module guessing an import."""

    def __init__(self, module: cst.Module) -> None:
        imports = ImportTable(module)
        tf_name, ops_name = imports.local_name_for("tensorflow"), imports.local_name_for("keras.ops")
        self.ops = tf_name is None and ops_name is not None
        self.tf_name = tf_name or "tf"
        self.ops_name = ops_name or "keras.ops"

    def cast(self, expr: cst.BaseExpression, dtype: cst.BaseExpression | None = None) -> cst.Call:
        if dtype is None:
            dtype = cst.SimpleString('"float32"') if self.ops else cst.parse_expression(f"{self.tf_name}.float32")
        func = cst.parse_expression(f"{self.ops_name}.cast" if self.ops else f"{self.tf_name}.cast")
        return cst.Call(func=func, args=[cst.Arg(expr), cst.Arg(dtype)])


def resolve_positions(wrapper: MetadataWrapper):
    """``PositionProvider``'s ranges; a RecursionError however LibCST surfaces it. Its provider records a
    compound statement's end from its body's in a ``finally``: recursion running out inside the body
    before the body is recorded makes that lookup a KeyError, and each enclosing statement's another
    (fuzz seed 71: 3,000 adjacent strings in a ``with`` in a ``def``, a left-nested ``ConcatenatedString``)."""
    try:
        return wrapper.resolve(PositionProvider)
    except KeyError as exc:
        cause: BaseException | None = exc
        while isinstance(cause, KeyError):  # one KeyError per enclosing compound statement
            cause = cause.__context__
        if isinstance(cause, RecursionError):
            raise RecursionError("nested too deeply for LibCST's position metadata") from None
        raise


def in_method(node, parents) -> bool:
    """Whether ``node`` is inside a method taking ``self`` (a layer's ``call``)."""
    current = parents.get(node)
    while current is not None:
        if isinstance(current, cst.FunctionDef):
            params = current.params.params
            return bool(params) and params[0].name.value == "self"
        current = parents.get(current)
    return False


class Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict) -> None:
        self.replacements = replacements

    def on_leave(self, original_node, updated_node):
        return self.replacements.get(original_node, updated_node)


def parsed(text: str) -> cst.Module | None:
    """The module, or None when it does not parse or is nested too deeply to parse safely
    (``mpfix.parsing``: LibCST's native parser can crash on such input; a RecursionError)."""
    try:
        return parse_module(text)
    except (cst.ParserSyntaxError, RecursionError, MemoryError):
        return None
