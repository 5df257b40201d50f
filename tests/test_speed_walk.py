"""Speed edits that change a code path give the same facts as the path they replace (turn 9).

* ``Visitor.walk`` dispatches once per node type and walk (default ``on_visit``/``on_leave``) and
  reads children without building a list: the visit/leave sequence is LibCST's own.
* ``gradient_syntax.returned_tapes`` returns at once when no ``with`` binds a tape: same result.
* ``VersionGuards`` finds conditional expressions with the fast walk instead of LibCST's traversal.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from mpfix.codemods._walk import Visitor, find_all, nodes_by_type, walk
from mpfix.codemods.analysis import gradient_syntax
from mpfix.codemods.names import ImportTable

from test_walk import SNIPPET  # tests/ is on sys.path (pytest's prepend import mode)

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = {"ClassDef", "Lambda", "Subscript"}  # visit_ returns False: children skipped, leave_ still called


def _events_by_libcst(module: cst.Module) -> list[tuple[str, int]]:
    events: list[tuple[str, int]] = []

    class Recorder(cst.CSTVisitor):
        def on_visit(self, node):
            events.append(("visit", id(node)))
            return type(node).__name__ not in SKIPPED

        def on_leave(self, original_node):
            events.append(("leave", id(original_node)))

    module.visit(Recorder())
    return events


def _recorder_class(events: list) -> type[Visitor]:
    """A Visitor with a visit_ and a leave_ method for every node type the walk meets (default dispatch)."""
    methods = {}
    for node_type in {type(n) for n in walk(cst.parse_module(SNIPPET), trivia=True)} | {cst.Module}:
        name = node_type.__name__

        def visit(self, node, skip=name in SKIPPED):
            events.append(("visit", id(node)))
            return False if skip else None

        def leave(self, node):
            events.append(("leave", id(node)))
        methods["visit_" + name], methods["leave_" + name] = visit, leave
    return type("Recorder", (Visitor,), {"trivia": True, **methods})


def _files() -> list[Path]:
    return [ROOT / "codemods" / "_walk.py", ROOT / "codemods" / "loss_scale_attribute.py"]


def test_default_dispatch_is_libcst_visit_and_leave_order():
    sources = [SNIPPET] + [p.read_text(encoding="utf-8") for p in _files()]
    events: list = []
    recorder = _recorder_class(events)
    for source in sources:
        module = cst.parse_module(source)
        events.clear()
        recorder().walk(module)
        # Only types the snippet has get methods; compare on those nodes.
        expected = _events_by_libcst(module)
        known = {id(n) for n in walk(module, trivia=True) if "visit_" + type(n).__name__ in vars(recorder)}
        skipped_inside = _inside_skipped(module)
        assert events == [e for e in expected if e[1] in known and e[1] not in skipped_inside]


def _inside_skipped(module: cst.Module) -> set[int]:
    inside: set[int] = set()
    for node in walk(module, trivia=True):
        if type(node).__name__ in SKIPPED and id(node) not in inside:
            inside.update(id(n) for n in walk(node, trivia=True) if n is not node)
    return inside


def test_overridden_on_visit_path_is_libcst_order():
    events: list = []

    class Hooks(Visitor):
        trivia = True

        def on_visit(self, node):
            events.append(("visit", id(node)))
            return type(node).__name__ not in SKIPPED

        def on_leave(self, node):
            events.append(("leave", id(node)))

    for source in [SNIPPET] + [p.read_text(encoding="utf-8") for p in _files()]:
        module = cst.parse_module(source)
        events.clear()
        Hooks().walk(module)
        assert events == _events_by_libcst(module)


def test_no_leave_method_no_marker_but_same_visits():
    module = cst.parse_module("def f(x):\n    return g(x, h(y))\n")
    seen: list[str] = []

    class Calls(Visitor):
        def visit_Call(self, node):
            seen.append(node.func.value)

    Calls().walk(module)
    assert seen == ["g", "h"]


def _returned_tapes_before(module, resolve):
    """The pre-turn-9 body of ``returned_tapes`` (no early exit), the oracle."""
    found = {}
    for func in [n for n in walk(module) if isinstance(n, cst.FunctionDef)]:
        names = {item.asname.name.value for node in walk(func) if isinstance(node, cst.With) for item in node.items
                 if item.asname is not None and isinstance(item.asname.name, cst.Name)
                 and isinstance(item.item, cst.Call) and gradient_syntax._is_tape(resolve, item.item.func)}
        if not names:
            continue
        for node in walk(func):
            value = node.value if isinstance(node, cst.Return) else None
            if isinstance(value, cst.Name) and value.value in names:
                found[func.name.value] = None
            elif isinstance(value, cst.Tuple):
                for position, element in enumerate(value.elements):
                    if isinstance(element.value, cst.Name) and element.value.value in names:
                        found[func.name.value] = position
    return found


TAPES = '''\
import tensorflow as tf

def forward(model, x):
    with tf.GradientTape() as tape:
        loss = model(x)
    return tape, loss

def alone(x):
    with tf.GradientTape(persistent=True) as t:
        y = x * x
    return t

def opened(path):
    with open(path) as fh:
        return fh
'''


class _Context:
    def __init__(self, module):
        self.module = module
        self.cache = {}


def test_returned_tapes_same_with_and_without_tapes():
    sources = [TAPES, TAPES.replace("tf.GradientTape", "tf.name_scope"), "def f():\n    return 1\n", SNIPPET]
    sources += [p.read_text(encoding="utf-8") for p in sorted((ROOT / "samples").glob("*.py"))]
    nonempty = 0
    for source in sources:
        module = cst.parse_module(source)
        resolve = ImportTable(module).resolve
        expected = _returned_tapes_before(module, resolve)
        assert gradient_syntax.returned_tapes(module, resolve) == expected
        assert gradient_syntax.returned_tapes(module, resolve, nodes_by_type(_Context(module))) == expected
        nonempty += bool(expected)
    assert gradient_syntax.returned_tapes(cst.parse_module(TAPES), ImportTable(cst.parse_module(TAPES)).resolve) == \
        {"forward": 0, "alone": None}
    assert nonempty >= 1


def test_conditional_expressions_in_libcst_visit_order():
    module = cst.parse_module("a = (x if (y if c else d) else z)\nb = [p if q else r for _ in s]\n"
                              "def f():\n    return u if (v if w else t) else o\n")
    seen: list = []

    class IfExps(cst.CSTVisitor):
        def visit_IfExp(self, node):
            seen.append(node)

    module.visit(IfExps())
    found = list(find_all(module, cst.IfExp))
    assert len(found) == 5 and all(a is b for a, b in zip(found, seen)) and len(seen) == 5


def _statements_before(body):
    """The pre-turn-9 recursive ``names._statements`` (the oracle)."""
    for stmt in body:
        yield stmt
        inner = getattr(stmt, "body", None)
        if isinstance(inner, cst.BaseSuite):
            yield from _statements_before(getattr(inner, "body", ()))
        elif isinstance(inner, (list, tuple)):
            yield from _statements_before(inner)
        for attr in ("orelse", "finalbody"):
            other = getattr(stmt, attr, None)
            if other is not None:
                yield from _statements_before([other] if not isinstance(other, (list, tuple)) else other)
        for handler in getattr(stmt, "handlers", ()) or ():
            yield from _statements_before([handler])


def test_statement_walk_same_order_as_the_recursive_one():
    from mpfix.codemods.names import _statements

    extra = "try:\n    import a\nexcept E:\n    import b\nelse:\n    import c\nfinally:\n    import d\n" \
            "if x:\n    pass\nelif y:\n    import e\nelse:\n    import f\nwhile z:\n    import g\nelse:\n    pass\n"
    for source in [SNIPPET, extra] + [p.read_text(encoding="utf-8") for p in _files()]:
        module = cst.parse_module(source)
        got, expected = list(_statements(module.body)), list(_statements_before(module.body))
        assert len(got) == len(expected) > 10 and all(a is b for a, b in zip(got, expected))


def test_dtype_facts_nodes_same_as_isinstance_filter():
    from mpfix.codemods.facts.dtype_facts import facts_for

    source = (ROOT / "samples" / "attention_mask_1e9.py").read_text(encoding="utf-8")
    facts = facts_for(cst.parse_module(source))
    region_of = facts._a.region_of
    for types in (cst.Call, (cst.Name, cst.Attribute, cst.Float), cst.BaseExpression, cst.BinaryOperation):
        for module_level in (False, True):
            expected = [n for n, r in region_of.items() if isinstance(n, types) and (module_level or r.kind != "module")]
            got = list(facts.nodes(types, module_level))
            assert len(got) == len(expected) and all(a is b for a, b in zip(got, expected))
    assert list(facts.nodes(cst.Call))  # the sample has analysed calls: the comparison saw something


def test_visit_batched_module_only_visitors_same_calls_as_the_full_walk():
    from libcst.metadata import MetadataWrapper

    from mpfix.codemods._walk import visit_batched

    module = cst.parse_module(SNIPPET)
    events: list = []

    class ModuleOnly(cst.BatchableCSTVisitor):
        def __init__(self, tag):
            super().__init__()
            self.tag = tag

        def visit_Module(self, node):
            events.append(("visit", self.tag, node is module))

        def leave_Module(self, node):
            events.append(("leave", self.tag, node is module))

    class WithCalls(ModuleOnly):
        def visit_Call(self, node):
            events.append(("call", self.tag, True))

    visit_batched(MetadataWrapper(module, unsafe_skip_copy=True), [ModuleOnly("a"), ModuleOnly("b")])
    shortcut = list(events)
    events.clear()
    MetadataWrapper(module, unsafe_skip_copy=True).visit_batched([ModuleOnly("a"), ModuleOnly("b")])  # LibCST's own
    assert shortcut == events == [("visit", "a", True), ("visit", "b", True), ("leave", "a", True), ("leave", "b", True)]
    events.clear()
    visit_batched(MetadataWrapper(module, unsafe_skip_copy=True), [ModuleOnly("a"), WithCalls("c")])
    mixed = list(events)
    events.clear()
    MetadataWrapper(module, unsafe_skip_copy=True).visit_batched([ModuleOnly("a"), WithCalls("c")])
    assert mixed == events and ("call", "c", True) in mixed  # a visitor of inner nodes: the full walk
