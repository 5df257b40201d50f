"""Where a same-file optimizer factory builds: under a ``with X.scope():`` of its own (MP106)."""

from __future__ import annotations

import libcst as cst


def _enters_a_scope(node) -> bool:
    """``with X.scope():`` for any X: in a factory, whatever strategy it enters is the one it builds under."""
    return isinstance(node, cst.With) and any(
        isinstance(item.item, cst.Call) and isinstance(item.item.func, cst.Attribute)
        and item.item.func.attr.value == "scope" and not item.item.args for item in node.items)


def _contains(node: cst.CSTNode, target: cst.CSTNode) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if current is target:
            return True
        stack.extend(current.children)
    return False


def under_a_scope(analysis, call: cst.Call) -> bool:
    """Whether a factory's build call lies inside a ``with X.scope():`` of the factory."""
    for scope in analysis.scopes:
        for st in scope.statements:
            if st.node is not None and _contains(st.node, call) and (
                    any(_enters_a_scope(w) for w in st.parents) or _enters_a_scope(st.node)):
                return True
    return False
