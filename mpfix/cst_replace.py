"""Node replacements applied to a LibCST module: which fixes can go together, and the transform.

``chosen`` keeps the fixes whose nodes do not overlap an earlier fix's (sorted disjoint spans, two
neighbours checked per span: linear in the number of fixes, not quadratic). ``Replace`` swaps the
changed nodes, entering only the subtrees that hold one.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

import libcst as cst

from mpfix.findings import Fix
from mpfix.positions import positions_of


class Replace(cst.CSTTransformer):
    """Swap the changed nodes, entering only the subtrees that hold one (``_ancestors``): a full
    rebuild of every node costs four times a plain walk, and JSON edits apply fixes many times."""

    def __init__(self, changes: dict, module: cst.Module | None = None) -> None:
        super().__init__()
        self.changes = changes
        self.enter = _ancestors(module, changes) if module is not None else None

    def on_visit(self, node) -> bool:
        return self.enter is None or id(node) in self.enter

    def on_leave(self, original_node, updated_node):
        replacement = self.changes.get(original_node, _MISSING)
        if replacement is _MISSING:
            return updated_node
        return replacement


_MISSING = object()
_PARENTS: list = [None, {}]  # the last module walked and its {id(child): parent}


def _child_nodes(node: cst.CSTNode):
    for name in _FIELDS.get(type(node)) or _FIELDS.setdefault(type(node), [f.name for f in dataclasses.fields(node)]):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, cst.CSTNode))


_FIELDS: dict[type, list[str]] = {}


def _ancestors(module: cst.Module, changes: dict) -> set[int]:
    """ids of the changed nodes and every node above them (the module's parent map is kept for reuse)."""
    if _PARENTS[0] is not module:
        parents: dict[int, cst.CSTNode] = {}
        stack = [module]
        while stack:
            node = stack.pop()
            for child in _child_nodes(node):
                parents[id(child)] = node
                stack.append(child)
        _PARENTS[:] = [module, parents]
    parents = _PARENTS[1]
    found = {id(module)}
    for node in changes:
        key = id(node)
        while key not in found:
            found.add(key)
            parent = parents.get(key)
            if parent is None:
                break
            key = id(parent)
    return found


def _span(positions, node):
    code_range = positions.get(node)
    if code_range is None:
        return None
    return (code_range.start.line, code_range.start.column), (code_range.end.line, code_range.end.column)


def _overlaps(a, b) -> bool:
    if a is None or b is None:
        return True
    return a[0] < b[1] and b[0] < a[1]


def chosen(module: cst.Module, fixes: Sequence[Fix], positions: dict | None = None) -> list[int]:
    """The fixes whose nodes do not overlap an earlier fix's (by index)."""
    # Overlaps are only possible between fixes: a single one (a JSON edit, an interactive
    # preview) needs no positions at all.
    if len(fixes) <= 1:
        return list(range(len(fixes)))
    if positions is None:
        positions = positions_of(module, [node for fix in fixes for node in fix.changes])
    starts: list = []  # the taken spans, disjoint, sorted by start: two neighbours decide an overlap
    ends: list = []
    unknown = False  # a node without a position may overlap anything
    chosen = []
    for index, fix in enumerate(fixes):
        spans = [_span(positions, node) for node in fix.changes]
        if any(s is None for s in spans):
            if starts or unknown:
                continue
            unknown = True
            chosen.append(index)
            continue
        if unknown or any(_overlaps_taken(s, starts, ends) for s in spans):
            continue  # applied in a later pass, on the re-parsed result
        merged: list = []  # one fix's spans may nest: kept disjoint, as the neighbour check needs
        for start, end in sorted(spans):
            if merged and start < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        for start, end in merged:
            at = bisect.bisect_left(starts, start)
            starts.insert(at, start)
            ends.insert(at, end)
        chosen.append(index)
    return chosen


def _overlaps_taken(span, starts: list, ends: list) -> bool:
    at = bisect.bisect_left(starts, span[0])
    return any(0 <= i < len(starts) and _overlaps(span, (starts[i], ends[i])) for i in (at - 1, at))
