"""Line and column of a few nodes: LibCST's ``PositionProvider``, paid for only where asked.

``PositionProvider`` regenerates the whole module and records a range for every
node: a regex split per token, two ``CodePosition`` objects and a dict entry per
node, a generator per statement. A file with one finding pays that for its
10,000 other nodes. ``positions_of`` runs the same code generation with a state
that only appends tokens, computes line and column from them when a wanted
node starts or ends, and stops once every wanted node is placed. The ranges are
exactly ``PositionProvider``'s (``tests/test_positions.py`` compares them node by
node on real code).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

try:  # LibCST's code generator state is internal: without it, PositionProvider does the work.
    from libcst._nodes.internal import CodegenState
except ImportError:  # pragma: no cover - a LibCST that moved it
    CodegenState = object  # type: ignore[assignment,misc]
    _LAZY = False
else:
    _LAZY = True

NEWLINE_RE = re.compile(r"\r\n?|\n")  # PositionProvider's definition of a line break


class _Placed(Exception):
    """Every wanted node has its range: the rest of the module need not be generated."""


class _NullContext:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


_NULL = _NullContext()


class _Syntactic:
    """``record_syntactic_position`` for a wanted node (PositionProvider's rule, lazily)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: "_LazyPositionState", node, start_node, end_node) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = self.state.now()

    def __exit__(self, exc_type, *exc: object) -> bool:
        if exc_type is not None:
            return False
        state = self.state
        computed = state.computed
        start = computed[self.start_node].start if self.start_node is not None else self.start
        end = computed[self.end_node].end if self.end_node is not None else state.now()
        computed[self.node] = CodeRange(start, end)
        state.done(self.node)
        return False


class _LazyPositionState(CodegenState):
    """A plain code generator that notes positions of ``wanted`` nodes only."""

    def __init__(self, module: cst.Module, wanted: set) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.wanted = set(wanted)  # nodes whose range is needed (grows: syntactic anchors)
        self.unplaced = set(wanted)  # asked for by the caller and not placed yet
        self.computed: dict = {}
        self.starts: dict = {}
        self._upto = 0  # tokens[:_upto] are accounted for in _line/_column
        self._line = 1
        self._column = 0

    def now(self) -> CodePosition:
        tokens = self.tokens
        if self._upto < len(tokens):
            chunk = "".join(tokens[self._upto:])
            if "\r" in chunk:
                # A "\r" and "\n" in two tokens are two line breaks token by token; keep that.
                for token in tokens[self._upto:]:
                    self._advance(token)
            else:
                self._advance(chunk)
            self._upto = len(tokens)
        return CodePosition(self._line, self._column)

    def _advance(self, text: str) -> None:
        segments = NEWLINE_RE.split(text)
        if len(segments) == 1:
            self._column += len(text)
        else:
            self._line += len(segments) - 1
            self._column = len(segments[-1])

    def pop_trailing_newline(self) -> None:
        # PositionProvider keeps counting the newline a module without one takes back.
        self.now()
        super().pop_trailing_newline()
        self._upto = len(self.tokens)

    def done(self, node) -> None:
        unplaced = self.unplaced
        if node in unplaced:
            unplaced.discard(node)
            if not unplaced:
                raise _Placed

    def before_codegen(self, node) -> None:
        if node in self.wanted:
            self.starts[node] = self.now()

    def after_codegen(self, node) -> None:
        if node in self.wanted and node not in self.computed and node in self.starts:
            self.computed[node] = CodeRange(self.starts[node], self.now())
            self.done(node)

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        if node not in self.wanted:
            return _NULL
        # The syntactic range borrows its ends from these children, generated inside.
        for anchor in (start_node, end_node):
            if anchor is not None:
                self.wanted.add(anchor)
        return _Syntactic(self, node, start_node, end_node)


def positions_of(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    """``PositionProvider`` ranges of ``nodes`` (those in ``module``; others are left out)."""
    asked = set(nodes)
    if not asked:
        return {}
    if not _LAZY:  # pragma: no cover
        ranges = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        return {node: ranges[node] for node in asked if node in ranges}
    state = _LazyPositionState(module, asked)
    try:
        module._codegen(state)
    except _Placed:
        pass
    computed = state.computed
    return {node: computed[node] for node in asked if node in computed}
