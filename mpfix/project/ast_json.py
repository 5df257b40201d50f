"""An exact JSON form of ``ast`` nodes, for per-file records kept in the cache folder (never pickle: the folder
may be hostile).

A node is ``{"_": class name, field: value, ..., attribute: value, ...}`` with every field and the position
attributes the node has (a node made by ``ast.Name(name)`` has no ``ctx``, and keeps none: the one field that
may be missing; no pass reads it). Constants that JSON
cannot hold (bytes, complex, float, ``...``) are tagged ``{"$": kind, "v": ...}``. ``decode`` accepts only the
concrete node classes of this Python's ``ast`` and checks every field against the type the class's ASDL signature
(its docstring: ``Name(identifier id, expr_context ctx)``) gives it: anything else raises ``ValueError``, so a
damaged or hostile record is a miss, never a malformed tree handed to the scan.
"""

from __future__ import annotations

import ast
import math
import re

_SIGNATURE = re.compile(r"^(\w+)\((.*)\)$", re.S)
_ATTRIBUTES = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def _signatures() -> dict[str, tuple[type, dict[str, tuple[str, str]]]]:
    """Class name -> (class, field -> (ASDL type, '' / '?' / '*')) for every concrete node class (deprecated
    aliases such as ``ast.Num`` have no signature and are left out)."""
    found: dict[str, tuple[type, dict[str, tuple[str, str]]]] = {}
    for name in dir(ast):
        cls = getattr(ast, name)
        if not (isinstance(cls, type) and issubclass(cls, ast.AST)) or cls.__module__ != "ast":
            continue
        doc = (cls.__doc__ or "").strip()
        fields: dict[str, tuple[str, str]] = {}
        if doc != name:
            match = _SIGNATURE.match(doc)
            if match is None or match.group(1) != name:
                continue
            for part in filter(None, (p.strip() for p in match.group(2).split(","))):
                kind, field = part.split()
                fields[field] = (kind.rstrip("?*"), kind[-1] if kind[-1] in "?*" else "")
        if tuple(fields) != tuple(cls._fields):
            continue
        found[name] = (cls, fields)
    return found


_CLASSES = _signatures()


def encode(node):
    """The JSON form of ``node`` (a node, a list of them, or a constant); ValueError where it has none."""
    if isinstance(node, ast.AST):
        name = type(node).__name__
        if _SPECS.get(name, (None,))[0] is not type(node):
            raise ValueError(f"not a plain ast node: {name}")
        out = {"_": name}
        for field in (*node._fields, *_ATTRIBUTES):
            if hasattr(node, field):
                out[field] = encode(getattr(node, field))
            elif field in node._fields and field != "ctx":
                raise ValueError(f"{name} without {field}")
        return out
    if isinstance(node, list):
        return [encode(item) for item in node]
    if node is None or type(node) in (bool, int, str):
        return node
    if type(node) is float:
        return {"$": "f", "v": repr(node)}
    if type(node) is complex:
        return {"$": "j", "v": [repr(node.real), repr(node.imag)]}
    if type(node) is bytes:
        return {"$": "b", "v": node.hex()}
    if node is Ellipsis:
        return {"$": "..."}
    raise ValueError(f"no JSON form for {type(node).__name__}")


def _float(text) -> float:
    if not isinstance(text, str):
        raise ValueError("a float is written as its repr")
    value = float(text)
    if math.isnan(value):
        raise ValueError("no NaN constant in source")
    return value


def _constant(data):
    if data is None or type(data) in (bool, int, str):
        return data
    if not isinstance(data, dict) or set(data) - {"$", "v"}:
        raise ValueError("not a constant")
    tag, value = data.get("$"), data.get("v")
    if tag == "f":
        return _float(value)
    if tag == "j" and isinstance(value, list) and len(value) == 2:
        return complex(_float(value[0]), _float(value[1]))
    if tag == "b" and isinstance(value, str):
        return bytes.fromhex(value)
    if tag == "..." and "v" not in data:
        return ...
    raise ValueError("not a constant")


# ``expr*`` lists that hold None: ``Dict.keys`` (``{**d}``) and ``arguments.kw_defaults`` (a keyword-only
# parameter with no default).
_NONE_IN_LIST = {("Dict", "keys"), ("arguments", "kw_defaults")}
_STR, _INT, _CONSTANT = "str", "int", "constant"


def _specs() -> dict[str, tuple[type, dict[str, tuple], tuple[str, ...]]]:
    """Class name -> (class, field -> (what it holds: _STR/_INT/_CONSTANT or a node base class, mark, None items),
    the fields that must be present)."""
    out = {}
    for name, (cls, fields) in _CLASSES.items():
        specs = {}
        for field, (kind, mark) in fields.items():
            what = _STR if kind in ("identifier", "string") else _INT if kind == "int" else \
                _CONSTANT if kind == "constant" else getattr(ast, kind, None)
            if what is None:
                break  # an ASDL type this Python's ast does not name: the class is left out
            specs[field] = (what, mark, (name, field) in _NONE_IN_LIST)
        else:
            out[name] = (cls, specs, tuple(f for f in fields if f != "ctx"))
    return out


_SPECS = _specs()


def _one(data, what):
    if what is _STR:
        if type(data) is not str:
            raise ValueError("a string field")
        return data
    if what is _INT:
        if type(data) is not int:
            raise ValueError("an int field")
        return data
    if what is _CONSTANT:
        return _constant(data)
    node = decode(data)
    if not isinstance(node, what):
        raise ValueError(f"a {what.__name__} field")
    return node


def decode(data) -> ast.AST:
    """The node ``encode`` wrote; ValueError for anything else (an unknown class or key, a field of the wrong type,
    a missing field: only ``ast.Name(name)``'s ctx may be missing)."""
    if type(data) is not dict:
        raise ValueError("a node is an object")
    name = data.get("_")
    found = _SPECS.get(name) if type(name) is str else None
    if found is None:
        raise ValueError("an unknown node class")
    cls, specs, required = found
    for field in required:
        if field not in data:
            raise ValueError("a node without one of its fields")
    node = cls.__new__(cls)
    for key, value in data.items():
        spec = specs.get(key)
        if spec is not None:
            what, mark, none_items = spec
            if mark == "*":
                if type(value) is not list:
                    raise ValueError("a list field")
                value = [None if item is None and none_items else _one(item, what) for item in value]
            elif value is not None or mark != "?":
                value = _one(value, what)
            setattr(node, key, value)
        elif key in _ATTRIBUTES and (type(value) is int or value is None and key.startswith("end_")):
            setattr(node, key, value)
        elif key != "_":
            raise ValueError(f"an unknown key {key!r}")
    return node


def decode_expr(data) -> ast.expr:
    node = decode(data)
    if not isinstance(node, ast.expr):
        raise ValueError("an expression")
    return node
