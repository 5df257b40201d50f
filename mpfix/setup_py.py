"""The requirements a ``setup.py`` passes to ``setup()``, read with ``ast`` and never executed.

Projects build requirements from constants: ``f"tensorflow>={MIN_TF},<{MAX_TF}"``,
``"tensorflow" + version_range``, ``"tensorflow>=%s" % MIN``, ``"...{}".format(...)``. What simple
constant evaluation can compute is computed here (string and number constants bound once at
module level, f-strings, ``%``, ``.format``, ``+`` and ``"".join`` of those, list ``+``). What it cannot
is returned as *unreadable* when it may name TensorFlow or Keras, so that the Keras target is
unknown rather than guessed from the installed TensorFlow (issue 20: a TF 2.6-2.13 project had
its correct Keras 2 loss scaling rewritten for the installed TF 2.21).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

# A requirement expression that mentions one of these may be TensorFlow's or Keras'.
_MAY_BE_TF = re.compile(r"tensorflow|keras|\btf\b|tf[_-]|_tf\b", re.I)
_MAX_DEPTH = 12
_MAX_TEXT = 10_000  # a computed string longer than this is not a requirement


class _Unknown(Exception):
    """The expression cannot be evaluated from constants."""


@dataclass
class SetupRequirements:
    """What ``setup()`` in one ``setup.py`` requires."""

    required: list[str] = field(default_factory=list)
    optional: list[str] = field(default_factory=list)
    # Each requirement expression that cannot be evaluated and may be TensorFlow's: its source text,
    # and, for a whole ``install_requires`` that cannot be read, the strings in it (the file it reads).
    unreadable: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)


class _Evaluator:
    def __init__(self, tree: ast.Module, text: str) -> None:
        self.text = text
        bound: dict[str, list[ast.AST]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        bound.setdefault(target.id, []).append(node.value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
                bound.setdefault(node.target.id, []).append(node.value if node.value is not None else node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bound.setdefault(alias.asname or alias.name.split(".")[0], []).append(node)
        self.bound = bound

    def value(self, node: ast.AST | None, depth: int = 0):
        """str, int, float, list or dict of those; raises _Unknown."""
        if node is None or depth > _MAX_DEPTH:
            raise _Unknown
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)) \
                and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            values = self.bound.get(node.id, [])
            if len(values) != 1:  # unbound, imported, or bound twice (which one is meant?)
                raise _Unknown
            return self.value(values[0], depth + 1)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e, depth + 1) for e in node.elts]
        if isinstance(node, ast.JoinedStr):
            return self._checked("".join(self._part(v, depth) for v in node.values))
        if isinstance(node, ast.BinOp):
            left, right = self.value(node.left, depth + 1), self.value(node.right, depth + 1)
            if isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, (str, list)):
                return self._checked(left + right)
            if isinstance(node.op, ast.Mod) and isinstance(left, str):
                args = tuple(right) if isinstance(right, list) else right
                if isinstance(args, dict):
                    raise _Unknown
                try:
                    return self._checked(left % args)
                except (TypeError, ValueError, KeyError):
                    raise _Unknown from None
            raise _Unknown
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not any(
                isinstance(a, ast.Starred) for a in node.args) and all(k.arg for k in node.keywords):
            receiver = self.value(node.func.value, depth + 1)
            args = [self.value(a, depth + 1) for a in node.args]
            kwargs = {k.arg: self.value(k.value, depth + 1) for k in node.keywords}
            if isinstance(receiver, str) and node.func.attr == "format":
                if any(isinstance(v, (list, dict)) for v in [*args, *kwargs.values()]):
                    raise _Unknown
                try:
                    return self._checked(receiver.format(*args, **kwargs))
                except (IndexError, KeyError, ValueError):
                    raise _Unknown from None
            if isinstance(receiver, str) and node.func.attr == "join" and len(args) == 1 and not kwargs \
                    and isinstance(args[0], list) and all(isinstance(v, str) for v in args[0]):
                return self._checked(receiver.join(args[0]))
        raise _Unknown

    def _part(self, node: ast.AST, depth: int) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.FormattedValue):
            value = self.value(node.value, depth + 1)
            if isinstance(value, (list, dict)):
                raise _Unknown
            value = {-1: value, 115: str(value), 114: repr(value), 97: ascii(value)}[node.conversion]
            spec = "" if node.format_spec is None else self.value(node.format_spec, depth + 1)
            try:
                return format(value, spec)
            except (TypeError, ValueError):
                raise _Unknown from None
        raise _Unknown

    @staticmethod
    def _checked(value):
        if len(value) > _MAX_TEXT:
            raise _Unknown
        return value

    def source(self, node: ast.AST) -> str:
        return (ast.get_source_segment(self.text, node) or ast.dump(node))[:200]

    def mentions_tf(self, node: ast.AST, depth: int = 0) -> bool:
        """The expression, or a module-level value it names, mentions TensorFlow/Keras."""
        if _MAY_BE_TF.search(self.source(node)):
            return True
        if depth > 2:
            return False
        return any(self.mentions_tf(value, depth + 1) for name in ast.walk(node) if isinstance(name, ast.Name)
                   for value in self.bound.get(name.id, [])
                   if not isinstance(value, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def read(text: str) -> SetupRequirements | None:
    """The requirements of every ``setup(...)`` call in ``text``; None when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    evaluator = _Evaluator(tree, text)
    found = SetupRequirements()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name != "setup":
            continue
        for keyword in node.keywords:
            if keyword.arg == "install_requires":
                _requirements(evaluator, keyword.value, found, found.required)
            elif keyword.arg == "extras_require":
                value = keyword.value
                if isinstance(value, ast.Name) and len(evaluator.bound.get(value.id, [])) >= 1:
                    value = evaluator.bound[value.id][-1]
                if isinstance(value, ast.Dict):
                    for item in value.values:
                        _requirements(evaluator, item, found, found.optional, opaque_ok=True)
    return found


def _requirements(evaluator: _Evaluator, node: ast.AST, found: SetupRequirements, out: list[str],
                  opaque_ok: bool = False, depth: int = 0) -> None:
    """Evaluate a requirement list element by element: one unreadable element spoils only itself."""
    if isinstance(node, ast.Name) and depth < 4 and evaluator.bound.get(node.id):
        node = evaluator.bound[node.id][-1]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for element in node.elts:
            if isinstance(element, ast.Starred):
                _requirements(evaluator, element.value, found, out, opaque_ok, depth + 1)
                continue
            try:
                value = evaluator.value(element)
            except _Unknown:
                if isinstance(element, (ast.List, ast.Tuple)):
                    _requirements(evaluator, element, found, out, opaque_ok, depth + 1)
                elif evaluator.mentions_tf(element):
                    found.unreadable.append((evaluator.source(element), ()))
                continue
            if isinstance(value, str):
                out.append(value)
            elif isinstance(value, list):
                out.extend(v for v in value if isinstance(v, str))
        return
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        _requirements(evaluator, node.left, found, out, opaque_ok, depth + 1)
        _requirements(evaluator, node.right, found, out, opaque_ok, depth + 1)
        return
    try:
        value = evaluator.value(node)
    except _Unknown:
        if evaluator.mentions_tf(node):
            found.unreadable.append((evaluator.source(node), ()))
        elif not opaque_ok:
            # ``install_requires=read_requirements()``: anything may be in there; the file names it
            # mentions let the caller see whether it reads a requirements file that is read anyway.
            strings = tuple(c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str))
            found.unreadable.append((evaluator.source(node), strings))
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list):
        out.extend(v for v in value if isinstance(v, str))
