"""float16 facts and fix spellings shared by the float16 rules (MP201–MP207).

What dtype an expression holds is decided by the dtype facts (``facts.dtype_facts``, the one
view of the inference every float16 rule queries); this module holds what float16 does to a number and how a fix spells a
cast in the file it edits (``tf.cast`` where the file uses TensorFlow, ``keras.ops.cast`` in a
backend-agnostic Keras 3 module that never imports it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import libcst as cst

from mpfix.codemods.analysis.dtype_lattice import argument, first_arg, is_float_literal, number  # noqa: F401
from mpfix.codemods.analysis.dtypes import dtype_analysis  # noqa: F401  (model_outputs' view of the regions)
from mpfix.codemods._walk import children
from mpfix.codemods.facts import ops as op_table
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


# -- numbers an expression always computes (C6: `tf.cast(tf.Variable(20.0) ** 2 ** 2, x.dtype)`) ----------

_FOLD_DEPTH = 12
# A name rebound more often than this is no constant (and each use would walk every binding: quadratic on a
# 1,500-line chain of `y = y * 1.5`, minutes per file).
_MAX_BINDINGS = 8
_LOOPS = (cst.For, cst.While)


@dataclass(frozen=True)
class Folded:
    """The number an expression always computes, and whether a float (not index arithmetic) is in it."""

    value: float
    floating: bool


def folded(facts, node: cst.BaseExpression, resolve, depth: int = 0, cache: dict | None = None) -> Folded | None:
    """The number ``node`` always computes, or None: literals, ``+ - * / ** //`` of such numbers, ops
    that keep their argument's value (``tf.constant``, ``tf.Variable``, ``tf.cast``: the op table's
    ``keeps_value``), and names bound to such a number by the last assignment that always runs before
    the use (``beta = tf.Variable(20.0) ** 2`` then ``beta = tf.cast(beta ** 2, x.dtype)``).
    ``facts``: ``DtypeFacts``; ``resolve``: the context's name resolver; ``cache``: one dict per file, which keeps
    statement positions between calls."""
    if cache is None:
        cache = {}
    if depth > _FOLD_DEPTH:
        return None
    value = number(node)
    if value is not None:
        return Folded(value, is_float_literal(node))
    if isinstance(node, cst.BinaryOperation):
        left = folded(facts, node.left, resolve, depth + 1, cache)
        right = folded(facts, node.right, resolve, depth + 1, cache) if left is not None else None
        if right is None:
            return None
        result = _apply(node.operator, left.value, right.value)
        return Folded(result, left.floating or right.floating) if result is not None else None
    if isinstance(node, cst.Call):
        qualified = resolve(node.func)
        spec = op_table.lookup(qualified)
        first = first_arg(node)
        math_function = op_table.PYTHON_MATH.get(qualified or "")
        if math_function is not None and first is not None and len(node.args) == 1:
            inner = folded(facts, first, resolve, depth + 1, cache)
            try:
                return Folded(float(math_function(inner.value)), True) if inner is not None else None
            except (OverflowError, ValueError):
                return None
        if spec is None or not spec.keeps_value or first is None:
            return None
        inner = folded(facts, first, resolve, depth + 1, cache)
        # A tensor made from a Python float is a float tensor (tf.constant(3) is int32: keeps its kind).
        return inner
    if isinstance(node, cst.Name):
        value_node = reaching_value(facts, node, cache)
        if value_node is not None:
            return folded(facts, value_node, resolve, depth + 1, cache)
        constant = facts.constant(node)
        if constant is not None and constant.literal is not node:
            return Folded(constant.value, is_float_literal(constant.literal))
        top = _module_value(facts, node, cache)
        if top is not None:
            return folded(facts, top, resolve, depth + 1, cache)
    return None


def _module_value(facts, name: cst.Name, cache: dict) -> cst.BaseExpression | None:
    """The value of a module-level ``NAME = value`` bound once, for a name the function neither binds nor takes."""
    if facts.values_of(name):
        return None
    place = facts.place(name)
    function = place.function if place is not None else None
    if function is not None and any(p.name.value == name.value for p in
                                    [*function.params.posonly_params, *function.params.params,
                                     *function.params.kwonly_params]):
        return None
    table = cache.get("module values")
    if table is None:
        table = cache["module values"] = {}
        bound: dict[str, int] = {}  # every binding of a name outside functions and classes, and `global` names
        for node in _walk(facts.module):
            targets = []
            if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.AsName)):
                targets = [node.target if not isinstance(node, cst.AsName) else node.name]
            elif isinstance(node, cst.Global):
                targets = [n.name for n in node.names]
                bound.update({n.name.value: 2 for n in node.names})
            for target in targets:
                for leaf in _walk(target):
                    if isinstance(leaf, cst.Name):
                        bound[leaf.value] = bound.get(leaf.value, 0) + 1
        for stmt in facts.module.body:
            for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and \
                        isinstance(small.targets[0].target, cst.Name) and bound.get(small.targets[0].target.value) == 1:
                    table[small.targets[0].target.value] = small.value
    return table.get(name.value)


def _walk(root: cst.CSTNode):
    """The nodes of ``root`` outside function and class bodies (module-level bindings)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if node is not root and isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            continue
        stack.extend(children(node))


def _apply(operator: cst.BaseBinaryOp, a: float, b: float) -> float | None:
    try:
        if isinstance(operator, cst.Add):
            return a + b
        if isinstance(operator, cst.Subtract):
            return a - b
        if isinstance(operator, cst.Multiply):
            return a * b
        if isinstance(operator, cst.Divide) and b != 0:
            return a / b
        if isinstance(operator, cst.FloorDivide) and b != 0:
            return float(a // b)
        if isinstance(operator, cst.Power) and abs(b) <= 64:
            result = a ** b
            return float(result) if not isinstance(result, complex) else None
    except (OverflowError, ZeroDivisionError, ValueError):
        return None
    return None


def reaching_value(facts, name: cst.Name, cache: dict | None = None) -> cst.BaseExpression | None:
    """The value of the assignment to ``name`` that always runs last before this use, or None.

    Each binding is placed by its path of (block, index) from the function down; one that sits
    directly in a block enclosing the use, before it, always runs; one in a branch before the use
    may run. The last binding before the use must be one that always runs, and a loop around the
    use must not carry a later binding back to it. Every binding is a plain ``name = value`` or ``name op= value``
    (which leaves no known value when it is the last one).
    """
    values = facts.values_of(name)
    if not values or len(values) > _MAX_BINDINGS:
        return None  # never bound here (a parameter, a global), or rebound many times
    cache = {} if cache is None else cache
    use_path = _path(facts, name, cache)
    in_loop = any(isinstance(a, _LOOPS) for a in facts.ancestors(name))
    latest: tuple[list[int], cst.BaseExpression | None] | None = None
    for value in values:
        statement = facts.parent(value)
        augmented = isinstance(statement, cst.AugAssign)  # `x /= w`: may change x; the value of none of it
        if not augmented and not (isinstance(statement, cst.Assign) and len(statement.targets) == 1):
            return None  # unpacking, `for`, `with`, `a = b = v`: not one plain number
        if name in _descendants_chain(facts, name, value):
            continue  # `beta = tf.cast(beta ** 2, ...)`: binds after this use is evaluated
        path = _path(facts, statement, cache)
        k = next((i for i, (a, b) in enumerate(zip(path, use_path)) if a != b), None)
        if k is None:
            return None  # the same statement holds both (`a = 1; f(a)` on one line) or the use is the target
        (block, index), (use_block, use_index) = path[k], use_path[k]
        if block != use_block or index > use_index:
            if in_loop:
                return None  # an exclusive branch or a later statement, carried back by the loop
            continue
        key = [i for _, i in path[:k + 1]]
        # The assignment's own line sits in a block that encloses the use (not in an `if c: x = 1` suite).
        always = k == len(path) - 1 or (k == len(path) - 2 and isinstance(facts.parent(statement), cst.SimpleStatementLine))
        if latest is None or key > latest[0]:
            latest = (key, value if always and not augmented else None)
    return latest[1] if latest is not None else None


def _descendants_chain(facts, name: cst.Name, value: cst.BaseExpression) -> list[cst.CSTNode]:
    """``name`` and its ancestors up to ``value`` (``[]`` when ``value`` does not contain ``name``)."""
    chain = [name]
    for ancestor in facts.ancestors(name):
        if ancestor is value:
            return chain
        chain.append(ancestor)
    return []


_STATEMENT_LISTS = (cst.IndentedBlock, cst.Module, cst.SimpleStatementLine, cst.SimpleStatementSuite)


def _path(facts, node: cst.CSTNode, cache: dict) -> list[tuple[int, int]]:
    """(block id, index in it) for each statement list enclosing ``node``, outermost first. ``cache`` keeps each
    block's statement indices (a block of 1,500 statements is indexed once, not once per lookup)."""
    path = []
    child = node
    for parent in facts.ancestors(node):
        if isinstance(parent, _STATEMENT_LISTS):
            kept = cache.get(id(parent))
            if kept is None or kept[0] is not parent:
                kept = cache[id(parent)] = (parent, {id(s): i for i, s in enumerate(parent.body)})
            path.append((id(parent), kept[1][id(child)]))
        child = parent
    path.reverse()
    return path
