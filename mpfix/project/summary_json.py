"""``crosscall_summary.FileSummary`` as JSON and back, exactly (the per-file records of ``file_records``).

Encoded right after ``summarise`` (before the scan moves its sites out). A context's ``Flow`` and a collect's
``bound`` table are shared by its sites: written once each (``flows``, ``bounds``) and shared again when read.
``decode`` checks every value's type (``ast_json`` the expressions'): a wrong one raises, and the record is a miss.
"""

from __future__ import annotations

from mpfix.project import ast_json
from mpfix.project.crosscall_records import CallContext
from mpfix.project.crosscall_summary import ClassSummary, FileSummary, Flow, FunctionSummary, Ref, Site
from mpfix.project.structural import StructuralSummary


def encode(summary: FileSummary, plain: bool = True) -> dict:
    """The JSON form of a summary ``summarise`` just made (ValueError where it has none); ``plain``: with its module
    functions' sites (else written as not gathered: the scan asks ``plain_sites`` for them when it walks them)."""
    if summary.class_dtypes is not None:
        raise ValueError("a summary the scan has used already")
    return _encode(summary, None, plain)


def encode_sites(sites: list[Site]) -> dict:
    """The JSON form of a list of sites (``plain_sites``, a helper's ``collect``)."""
    return _encode(None, sites)


def _encode(summary: FileSummary | None, sites: list[Site] | None, plain: bool = True) -> dict:
    flows: list = []
    bounds: list = []
    seen: dict[int, int] = {}  # id(shared object) -> its index (the objects live while this runs)

    def shared(obj, table: list, write) -> int:
        if id(obj) not in seen:
            seen[id(obj)] = len(table)
            table.append(None)
            table[seen[id(obj)]] = write(obj)
        return seen[id(obj)]

    def flow(f: Flow) -> list:
        return [sorted(f.params), {name: [[line, ast_json.encode(value), dotted] for line, value, dotted in entries]
                                   for name, entries in f.assigned.items()}]

    def site(s: Site) -> list:
        return [s.target, s.local, s.context.value, s.caller, ast_json.encode(s.positional),
                {k: ast_json.encode(v) for k, v in s.keywords.items()},
                shared(s.bound, bounds, lambda b: {k: _ref(r) for k, r in b.items()}),
                s.line, None if s.flow is None else shared(s.flow, flows, flow), sorted(s.float32)]

    if summary is None:
        return {"sites": [site(s) for s in sites], "flows": flows, "bounds": bounds}
    body = {
        "path": summary.path, "module": summary.module, "imports": summary.imports,
        "classes": [[c.name, [_ref(b) for b in c.bases], sorted(c.methods), sorted(c.reached_from_call), c.line]
                    for c in summary.classes.values()],
        "functions": [[f.name, list(f.params), list(f.kwonly), f.line] for f in summary.functions.values()],
        "called": sorted(summary.called),
        "class_sites": {name: [site(s) for s in found] for name, found in summary.class_sites.items()},
        "plain_sites": [site(s) for s in summary.plain_sites] if plain else [],
        "plain_collected": summary.plain_collected and plain,
        "structural": None if summary.structural is None else summary.structural.to_json(),
    }
    return {**body, "flows": flows, "bounds": bounds}


def _ref(ref: Ref) -> list:
    return [ref.local, ref.dotted]


def _str(value) -> str:
    if not isinstance(value, str):
        raise ValueError("a string")
    return value


def _opt(value) -> str | None:
    return None if value is None else _str(value)


def _int(value) -> int:
    if type(value) is not int:
        raise ValueError("an int")
    return value


def _list(value) -> list:
    if not isinstance(value, list):
        raise ValueError("a list")
    return value


def _dict(value) -> dict:
    if not isinstance(value, dict):
        raise ValueError("an object")
    return value


def _bool(value) -> bool:
    if type(value) is not bool:
        raise ValueError("a bool")
    return value


def _strings(value) -> list[str]:
    return [_str(v) for v in _list(value)]


def _read_ref(value) -> Ref:
    local, dotted = _list(value)
    return Ref(_opt(local), _opt(dotted))


def decode(data) -> FileSummary:
    """The summary ``encode`` wrote; ValueError/TypeError (or KeyError) for anything else."""
    return _decode(data, False)


def decode_sites(data) -> list[Site]:
    """The sites ``encode_sites`` wrote."""
    return _decode(data, True)


def _decode(data, sites_only: bool):
    data = _dict(data)
    bounds = [{_str(k): _read_ref(r) for k, r in _dict(b).items()} for b in _list(data["bounds"])]
    flows = []
    for entry in _list(data["flows"]):
        params, assigned = _list(entry)
        flows.append(Flow(frozenset(_strings(params)), {
            _str(name): [(_int(line), ast_json.decode_expr(value), _opt(dotted))
                         for line, value, dotted in map(_list, _list(entries))]
            for name, entries in _dict(assigned).items()}))

    def site(value) -> Site:
        target, local, context, caller, positional, keywords, bound, line, flow, float32 = _list(value)
        return Site(_str(target), _bool(local), CallContext(_str(context)), _opt(caller),
                    [ast_json.decode_expr(v) for v in _list(positional)],
                    {_str(k): ast_json.decode_expr(v) for k, v in _dict(keywords).items()},
                    bounds[_int(bound)], _int(line), None if flow is None else flows[_int(flow)],
                    frozenset(_strings(float32)))

    if sites_only:
        return [site(s) for s in _list(data["sites"])]
    summary = FileSummary(_str(data["path"]), _str(data["module"]),
                          {_str(k): _str(v) for k, v in _dict(data["imports"]).items()},
                          called=frozenset(_strings(data["called"])))
    for name, bases, methods, reached, line in map(_list, _list(data["classes"])):
        summary.classes[_str(name)] = ClassSummary(name, tuple(_read_ref(b) for b in _list(bases)),
                                                   frozenset(_strings(methods)), frozenset(_strings(reached)),
                                                   _int(line))
    for name, params, kwonly, line in map(_list, _list(data["functions"])):
        summary.functions[_str(name)] = FunctionSummary(name, tuple(_strings(params)), tuple(_strings(kwonly)),
                                                        _int(line))
    summary.class_sites = {_str(name): [site(s) for s in _list(found)]
                           for name, found in _dict(data["class_sites"]).items()}
    summary.plain_sites = [site(s) for s in _list(data["plain_sites"])]
    summary.plain_collected = _bool(data["plain_collected"])
    structural = data["structural"]
    summary.structural = None if structural is None else StructuralSummary.from_json(_list(structural))
    return summary
