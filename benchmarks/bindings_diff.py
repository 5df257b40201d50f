"""Where the dtype regions' name tables and the per-scope binding model still differ (issue 18, goal 3).

For every function region of the dtype analysis (registered and shadow ones), the region's own tables
(``Region.assigned``/``unpacked``, filled by ``dtype_regions._Collector``) are compared with
``Bindings.of(scope)`` of the same function (``analysis.bindings``), name by name:

* ``closure``: a name the table has that only a nested ``def`` binds (the closure walked into the outer table);
* ``table-only``: any other name the table has and the scope does not bind;
* ``with``, ``nested-tuple``, ``bindings-only``: names the scope binds that the table lacks (by the binding's kind);
* ``paired``: ``a, b = x, y``: the table lacks the element the binding has (before: an ``ELEMENT`` of the tuple);
* ``count``: both have the name, with a different number of values.

    python benchmarks/bindings_diff.py [CORPUS_DIR ...]   # default: tf_keras, keras, tfm under $MPFIX_CORPORA

No TensorFlow; prints the counts and one example per kind.
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import libcst as cst

from mpfix.codemods.analysis.bindings import Bindings, BindingKind
from mpfix.codemods.analysis.dtype_tables import own as own_table
from mpfix.codemods.analysis.dtypes import DtypeAnalysis
from mpfix.codemods.analysis.gradient_records import _encloses
from mpfix.codemods.analysis.gradient_syntax import _scopes
from mpfix.codemods.names import ImportTable

CORPORA = Path(os.environ.get("MPFIX_CORPORA", "/work/corpora"))
DEFAULT = [CORPORA / "tf_keras" / "tf_keras", CORPORA / "keras" / "keras", CORPORA / "tfm"]


def compare(path: Path, counts: collections.Counter, examples: dict[str, str]) -> int:
    try:
        module = cst.parse_module(path.read_bytes())
        analysis = DtypeAnalysis(module, ImportTable(module).resolve, None, keras=2 if "tf_keras" in str(path) else 3)
    except Exception:  # noqa: BLE001  (a file the analysis cannot take is not this benchmark's business)
        return 0
    scopes = _scopes(module)
    bindings = Bindings(scopes)
    scope_of = {id(s.node): s for s in scopes}
    regions = {id(r): r for r in [*analysis.regions, *analysis._region_by_func.values()]
               if isinstance(r.node, cst.FunctionDef)}
    for region in regions.values():
        scope = scope_of.get(id(region.node))
        if scope is None:
            continue
        own = {n: bs for n, bs in bindings.of(scope).names.items()
               if "." not in n and any(b.kind is not BindingKind.PARAMETER for b in bs)}
        nested = [s for s in scopes if s.node is not region.node and _encloses(region.node, s.node)]
        table = own_table(region.assigned)  # a closure's own names (its table reads through to the enclosing one's)
        where = f"{path}:{region.name}"

        def note(kind: str, name: str) -> None:
            counts[kind] += 1
            examples.setdefault(kind, f"{where} {name}")

        for name, values in table.items():
            if name not in own:
                inner = any(name in bindings.of(s).names for s in nested)
                note("closure" if inner else "table-only", name)
                continue
            found = [b for b in own[name] if b.kind is not BindingKind.PARAMETER]
            if any(b.path and b.element is None and not b.starred and not any(v is b.value for v in values)
                   for b in found):
                note("paired", name)  # the table lacks the element a paired binding has
            elif len(found) != len(values):
                note("count", name)
        for name, found in own.items():
            if name in table:
                continue
            found = [b for b in found if b.kind is not BindingKind.PARAMETER]
            if any(b.kind is BindingKind.WITH for b in found):
                note("with", name)
            elif any(len(b.path) > 1 for b in found):
                note("nested-tuple", name)
            else:
                note("bindings-only", name)
    return len(regions)


def main(argv: list[str]) -> None:
    roots = [Path(a) for a in argv] or DEFAULT
    counts: collections.Counter = collections.Counter()
    examples: dict[str, str] = {}
    regions = files = 0
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            files += 1
            regions += compare(path, counts, examples)
    print(f"{files} files, {regions} function regions")
    for kind in ("closure", "table-only", "with", "nested-tuple", "bindings-only", "paired", "count"):
        print(f"{kind:14} {counts[kind]:5}  {examples.get(kind, '')}")


if __name__ == "__main__":
    main(sys.argv[1:])
