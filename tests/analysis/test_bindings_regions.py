"""One target decomposition (``bindings.decompose``) for the binding model and the dtype regions' tables.

The dtype inference reads per-region tables (``Region.assigned/unpacked/iterated/augmented``) that
``dtype_regions._Collector`` fills from the ``Binding`` records ``decompose`` makes; these tests pin
both the records and the tables' semantics (every plain name; a name paired with a literal tuple's element is
that element; another unpacked name is an ``ELEMENT`` of the whole value at its index; a starred one, or one
inside a nested tuple, is an element that is not unpacked).
"""

from __future__ import annotations

import textwrap

import libcst as cst

from mpfix.codemods.analysis.bindings import BindingKind, decompose
from mpfix.codemods.analysis.dtype_regions import ELEMENT, FLOAT32_VARIABLE
from mpfix.codemods.analysis.dtypes import DtypeAnalysis
from mpfix.codemods.names import ImportTable


def _assign(code: str) -> cst.Assign:
    return cst.parse_statement(code).body[0]


def test_decompose_records_path_star_and_the_whole_value():
    assign = _assign("a, (b, *c), self.d, e[0] = v\n")
    found = decompose(assign.targets[0].target, assign.value, assign, (), BindingKind.ASSIGN)
    by_name = {b.name: b for b in found}
    assert [b.name for b in found] == ["a", "b", "c", "self.d"]  # a subscript binds no name
    assert by_name["a"].path == (0,) and by_name["a"].element == 0 and by_name["a"].kind is BindingKind.UNPACK
    assert by_name["b"].path == (1, 0) and not by_name["b"].starred
    assert by_name["c"].path == (1, 1) and by_name["c"].starred
    assert by_name["self.d"].path == (2,)
    assert all(b.source is assign.value and b.statement is assign for b in found)


def test_decompose_pairs_a_literal_tuple_but_keeps_its_source():
    assign = _assign("first, second = x, y\n")
    first, second = decompose(assign.targets[0].target, assign.value, assign, (), BindingKind.ASSIGN)
    assert isinstance(second.value, cst.Name) and second.value.value == "y" and second.element is None
    assert second.source is assign.value and second.path == (1,)


CODE = """
    import tensorflow as tf

    def f(model, pair, v, items, xs, t):
        a, (b, c) = pair
        x, *rest = v
        first, second = t, t
        for var in model.trainable_variables:
            pass
        for i, item in items:
            pass
        y = [z for z in xs]
        s = t
        s += t
        self_like = model
        self_like.w = t
        return a
"""


def _region():
    module = cst.parse_module(textwrap.dedent(CODE).lstrip("\n"))
    analysis = DtypeAnalysis(module, ImportTable(module).resolve, None, keras=3)
    func = next(s for s in module.body if isinstance(s, cst.FunctionDef))
    return module, analysis.region_for(func)


def test_region_tables_keep_their_semantics():
    module, region = _region()
    code = module.code_for_node
    assert region.assigned["a"] == [ELEMENT] and [(code(v), i) for v, i in region.unpacked["a"]] == [("pair", 0)]
    # nested tuples: elements nobody indexes (before, not recorded at all)
    assert region.assigned["b"] == [ELEMENT] and region.assigned["c"] == [ELEMENT] and "b" not in region.unpacked
    assert region.assigned["rest"] == [ELEMENT] and "rest" not in region.unpacked  # starred: no index
    assert [code(v) for v in region.assigned["second"]] == ["t"]  # paired: the element, and still unpacked:
    assert [(code(v), i) for v, i in region.unpacked["second"]] == [("t, t", 1)]
    assert region.assigned["var"] == [FLOAT32_VARIABLE] and "var" not in region.iterated
    assert region.assigned["i"] == [ELEMENT] and "i" not in region.unpacked and "i" not in region.iterated
    assert region.assigned["z"] == [ELEMENT] and [code(v) for v in region.iterated["z"]] == ["xs"]
    assert [code(v) for v in region.assigned["s"]] == ["t", "t"] and len(region.augmented) == 1
    assert not any("." in name for name in region.assigned)  # attribute targets are the class's, not the region's
