"""What a mix outside a layer needs: float16 that comes from a Keras-instance parameter, and accumulators.

In a module function one of whose parameters is a Keras layer/model instance (``Region.layer_params``: handed one
by a caller, or typed by what the function reads of it, ``param_types``), ``net(x)`` is the compute dtype. Such a
function is no layer: nothing autocasts, and float16 elsewhere in it is a guess. So MP206 counts a mix there only
when its float16 operand comes from calling such a parameter (``from_layer_params``).

The wide side is often an accumulator (research DELF, N15-N21):

    descriptors = tf.zeros((0, net.meta["outputdim"]))        # float32
    for image in loader:
        descriptors = tf.concat([descriptors, net(image)], 0)  # raises on the first pass

Read flow-insensitively, ``descriptors`` joins float32 and the concat's result (unknown); ``accumulated_dtype``
reads it as the first pass does: an assignment that accumulates into the name itself (``x = tf.concat([x, v])``,
``x = x + v``, ``x op= v``) keeps its dtype (it raises, or both sides agree); the other assignments that can
reach the use (before it, or in a loop around both) are joined.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from mpfix.codemods._walk import children
from mpfix.codemods.analysis.dtype_lattice import UNK, Dtype, join_all
from mpfix.codemods.analysis.dtype_regions import ELEMENT, FLOAT32_VARIABLE, Region

_LOOPS = (cst.For, cst.While)


def from_layer_params(analysis, node: cst.BaseExpression, region: Region, depth: int = 0,
                      seen: set[str] | None = None) -> bool:
    """``node`` is computed from a call of one of the region's Keras-instance parameters (``net(x)``,
    ``tf.pow(net(x), p)``, a name bound to one)."""
    if depth > 12 or not region.layer_params:
        return False
    node_type = type(node)
    if node_type is cst.Call and isinstance(node.func, cst.Name) and node.func.value in region.layer_params:
        return True
    if node_type is cst.Name:
        seen = set() if seen is None else seen
        if node.value in seen:
            return False
        seen.add(node.value)
        # `attention, features = net(x)`: an element of the model's outputs (``region.unpacked``: source, index)
        return any(from_layer_params(analysis, v, region, depth + 1, seen)
                   for v in region.assigned.get(node.value, ()) if v is not ELEMENT and v is not FLOAT32_VARIABLE) or \
            any(from_layer_params(analysis, source, region, depth + 1, seen)
                for source, _ in region.unpacked.get(node.value, ()))
    if node_type is cst.Lambda:
        return False
    return any(from_layer_params(analysis, child, region, depth + 1, seen) for child in children(node, trivia=True)
               if isinstance(child, (cst.BaseExpression, cst.Arg, cst.Element)))


def _accumulates(value: cst.BaseExpression, name: str,
                 operands: Callable[[cst.Call], list[cst.BaseExpression]]) -> bool:
    """``value`` combines ``name`` itself with something, keeping its dtype: ``tf.concat([x, v])``, ``x + v``."""
    if isinstance(value, cst.BinaryOperation):
        sides = [value.left, value.right]
    elif isinstance(value, cst.Call):
        sides = operands(value)
    else:
        return False
    return any(isinstance(s, cst.Name) and s.value == name for s in sides)


def _loops(analysis, node: cst.CSTNode, region: Region) -> set[int]:
    found = set()
    for ancestor in analysis.ancestors(node):
        if ancestor is region.node:
            break
        if isinstance(ancestor, _LOOPS):
            found.add(id(ancestor))
    return found


def accumulated_dtype(analysis, name: cst.Name, region: Region,
                      operands: Callable[[cst.Call], list[cst.BaseExpression]]) -> Dtype:
    """The dtype ``name`` holds at its use, accumulations into it left out (they keep its dtype); unknown when
    the assignments that can reach it disagree or one is not an expression of this function."""
    where = analysis.order.get(name)
    values = region.assigned.get(name.value, [])
    if where is None or not values or name.value in region.iterated or name.value in region.unpacked:
        return UNK
    use_ancestors = {id(a) for a in analysis.ancestors(name)}
    use_loops = _loops(analysis, name, region)
    dtypes = set()
    for value in values:
        if value is ELEMENT or value is FLOAT32_VARIABLE or analysis.order.get(value) is None:
            return UNK
        if id(value) in region.augmented or id(value) in use_ancestors or _accumulates(value, name.value, operands):
            continue  # `x op= v`; `x = f(x)` around this use; `x = tf.concat([x, v])`
        if analysis.order[value] > where and not (use_loops & _loops(analysis, value, region)):
            continue  # after the use, in no loop around it: never reaches it
        dtypes.add(analysis.dtype_insensitive(value, region))
    if name.value in region.param_dtypes:
        dtypes.add(region.param_dtypes[name.value])  # the parameter's own value reaches the first pass
    if not dtypes or UNK in dtypes or len(dtypes) > 1:
        return UNK
    return join_all(dtypes)
