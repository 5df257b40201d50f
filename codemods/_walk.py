"""Small tree searches for rules, without ``libcst.matchers``.

``libcst.matchers`` takes ~0.3 s to import (it is one generated module per node
type): more than everything else ``mpfix check`` imports besides LibCST, and a
one-file pre-commit run pays it every time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst


def find_all(root: cst.CSTNode, node_type: type[cst.CSTNode] | tuple[type[cst.CSTNode], ...],
             where: Callable[[cst.CSTNode], bool] | None = None) -> Iterator[cst.CSTNode]:
    """Every node of ``node_type`` under ``root`` (``root`` included), in source order."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, node_type) and (where is None or where(node)):
            yield node
        stack.extend(reversed(node.children))
