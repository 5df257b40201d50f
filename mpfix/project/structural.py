"""Structural parameter typing across the project: a parameter is a Keras model when what the function reads of it
only a project Keras class defines (issue 18, C33).

research DELF ``train_utils.py`` (N17, N18) and ``tuples_dataset.py`` (N21): ``_compute_loss_and_gradient(criterion,
model, ...)`` and ``extract_descriptors_from_image_paths(net, ...)`` read ``model.meta['outputdim']``; no file of the
corpus passes them the model, but ``meta`` is assigned by ``GlobalFeatureNet(tf.keras.Model)`` in
``global_model.py`` alone (``self.meta = {...}``). The fact (``typed_parameters``):

    a parameter on which a function reads attributes, where every attribute among them that a project class
    defines is defined by a project Keras layer/model class and by no other project class, and one such class
    defines them all, is an instance of a Keras class; if every such class's outputs follow the compute dtype
    (its text never spells float32), calling it returns the compute dtype.

Only names the project defines are evidence (``self.x = ...`` in a method, a method, a class attribute, a
project base's too); the members every Keras layer has (``KERAS_MEMBERS``: ``call``, ``trainable_variables``,
``compute_dtype``...) name no class and are neutral: ``tf.Module``s and optimizers share several, and a model
from outside the project may have a float32 head. The records are the cross-file scan's own:
``CrossCall(function, PLAIN, ((param, KERAS_INSTANCE),))``; ``dtype_regions`` seeds them like a caller's.

Pure and ``ast``-only (``check`` never imports LibCST or TensorFlow here): ``summarize`` makes a file's JSON-able
summary from its tree, ``records`` decides from every file's summary. ``codemods/analysis/param_types.py`` applies
the same ``typed_parameters`` within one file.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mpfix.project.crosscall_records import ArgKind, CallContext, CrossCall
from mpfix.project.structural_types import ClassShape, class_index, typed_parameters

# -- one file's summary (ast) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ClassSummary:
    name: str
    bases: tuple[str, ...]  # dotted, resolved through the file's imports where they name an import
    defines: frozenset[str]  # its own (bases' are added by ``records``)
    spells_float32: bool


@dataclass(frozen=True)
class StructuralSummary:
    """What ``records`` needs of one file: its classes and its module functions' parameter reads."""

    classes: tuple[ClassSummary, ...] = ()
    reads: tuple[tuple[str, tuple[tuple[str, frozenset[str]], ...]], ...] = ()  # function -> ((param, attrs), ...)

    def to_json(self) -> list:
        return [[[c.name, list(c.bases), sorted(c.defines), c.spells_float32] for c in self.classes],
                [[f, [[p, sorted(a)] for p, a in params]] for f, params in self.reads]]

    @classmethod
    def from_json(cls, data: list) -> "StructuralSummary":
        classes, reads = data
        return cls(tuple(ClassSummary(str(n), tuple(map(str, b)), frozenset(map(str, d)), bool(f))
                         for n, b, d, f in classes),
                   tuple((str(f), tuple((str(p), frozenset(map(str, a))) for p, a in params)) for f, params in reads))


def dotted_name(node: ast.expr) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, else None (also the cross-file scan's)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _self_targets(node: ast.expr, found: set[str]) -> None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        found.add(node.attr)
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            _self_targets(element, found)


def _statements(body: list[ast.stmt], defines: set[str]) -> None:
    """``self.x = ...`` targets in a statement list and the blocks inside it (statements only: an attribute is
    assigned by a statement, never inside an expression); nested classes are their own."""
    for stmt in body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                _self_targets(target, defines)
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            _self_targets(stmt.target, defines)
        elif not isinstance(stmt, ast.ClassDef):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(stmt, field, None)
                if isinstance(block, list):
                    _statements(block, defines)
            for handler in getattr(stmt, "handlers", ()):
                _statements(handler.body, defines)
            for case in getattr(stmt, "cases", ()):
                _statements(case.body, defines)


# What may make a Keras class's output float32 under a mixed policy: ``float32`` spelled, or the layer's variable
# dtype read (``tf.cast(y, self.dtype)``: ``self.dtype`` is float32 under ``mixed_float16``). The bytes first.
MAY_BE_FLOAT32 = re.compile(rb"float32|self\.(?:variable_)?dtype\b")


def _spells_float32(node: ast.ClassDef) -> bool:
    return any((isinstance(sub, ast.Attribute) and (sub.attr == "float32" or sub.attr in ("dtype", "variable_dtype")
                                                     and isinstance(sub.value, ast.Name) and sub.value.id == "self"))
               or (isinstance(sub, ast.Constant) and sub.value == "float32") for sub in ast.walk(node))


def _class(node: ast.ClassDef, imports: Mapping[str, str], float32_text: bool,
           lines: list[bytes] | None) -> ClassSummary:
    defines: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defines.add(stmt.name)
            _statements(stmt.body, defines)
        elif isinstance(stmt, ast.Assign):
            defines.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            defines.add(stmt.target.id)
    bases = []
    for base in node.bases:
        dotted = dotted_name(base)
        if dotted is None:
            continue
        head, _, rest = dotted.partition(".")
        target = imports.get(head)
        bases.append(f"{target}.{rest}" if target and rest else target or dotted)
    if not float32_text:
        spells = False
    elif lines is not None:  # its source lines spell float32 (a comment too: withdraws the fact, never adds one)
        spells = any(MAY_BE_FLOAT32.search(line) for line in lines[node.lineno - 1:node.end_lineno or node.lineno])
    else:
        spells = _spells_float32(node)
    return ClassSummary(node.name, tuple(bases), frozenset(defines), spells)


def _bound(node: ast.AST, found: set[str]) -> None:
    if isinstance(node, ast.Name):
        found.add(node.id)
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            _bound(element, found)
    elif isinstance(node, ast.Starred):
        _bound(node.value, found)


# Fields that never hold a node in a parsed tree (names, numbers, flags, a constant's value), so no walk reads them;
# ``name`` is a string everywhere but in ``TypeAlias`` (3.12). Lists hold nodes only, but for two that may hold None.
_SCALARS = frozenset({"ctx", "id", "attr", "arg", "asname", "module", "level", "kind", "conversion", "simple",
                      "is_async", "type_comment", "rest", "kwd_attrs", "tag"})
_SCALARS_OF = {ast.Constant: frozenset({"value"}), ast.Global: frozenset({"names"}), ast.Nonlocal: frozenset({"names"})}
_MAY_HOLD_NONE = frozenset({"keys", "kw_defaults"})  # ``{**x}``'s key, a keyword-only parameter with no default
_TYPE_ALIAS = getattr(ast, "TypeAlias", None)
_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}  # node type -> (field, may hold None in its list)


def _fields(kind: type) -> tuple[tuple[str, bool], ...]:
    skip = _SCALARS_OF.get(kind, frozenset())
    names = _FIELDS[kind] = tuple((name, name in _MAY_HOLD_NONE) for name in kind._fields
                                  if name not in _SCALARS and name not in skip and (name != "name" or kind is _TYPE_ALIAS))
    return names


def ast_children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes`` without its generator, and without the ``ctx`` markers (``Load``/``Store``),
    which no project pass reads (the order of the fields, as ``ast`` gives them)."""
    names = _FIELDS.get(type(node))
    if names is None:
        names = _fields(type(node))
    out: list[ast.AST] = []
    for name, may_hold_none in names:
        value = getattr(node, name, None)
        if type(value) is list:
            out.extend([item for item in value if item is not None] if may_hold_none else value)
        elif isinstance(value, ast.AST):
            out.append(value)
    return out


def breadth_first(root: ast.AST) -> list[ast.AST]:
    """``ast.walk``'s nodes in ``ast.walk``'s order (breadth first) without the ``ctx`` markers: ``ast_children``
    inlined (a function call per node was half of the walk: 1,347 top-level definitions of tf-models, 0.23 -> 0.11 s)."""
    todo = [root]
    get = _FIELDS.get
    for node in todo:  # the list grows as it is read
        names = get(type(node))
        if names is None:
            names = _fields(type(node))
        for name, may_hold_none in names:
            value = getattr(node, name, None)
            if type(value) is list:
                todo.extend([item for item in value if item is not None] if may_hold_none else value)
            elif isinstance(value, ast.AST):
                todo.append(value)
    return todo


def _reads(func: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[tuple[str, frozenset[str]], ...]:
    """Parameter -> attributes read on it in the body (nested functions, lambdas, classes left out), for the
    parameters the function calls (``net(x)``: only a call's result can be the compute dtype) and never rebinds."""
    args = func.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]} - {"self", "cls"}
    reads: dict[str, set[str]] = {}
    rebound: set[str] = set()
    called: set[str] = set()
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in params:
            reads.setdefault(node.value.id, set()).add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            rebound.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            rebound.update(node.names)
        stack.extend(ast_children(node))  # the order does not matter: every answer is a set
    return tuple(sorted((p, frozenset(a)) for p, a in reads.items() if p in called and p not in rebound))


def summarize(tree: ast.Module, imports: Mapping[str, str], functions: bool = True,
              classes: bool | None = True, called: frozenset[str] | None = None,
              float32_text: bool = True, source: bytes | None = None) -> StructuralSummary:
    """One file's summary: its module functions' parameter reads (``functions``) and top-level classes
    (``classes``; None: only where a function reads something); ``imports``: local name -> dotted target.
    Cost cuts a caller that has the file's bytes can give: ``called``, every name the file calls (``name(``
    in its bytes: a function none of whose parameters is among them is not walked); ``float32_text``, False
    where the bytes never spell ``float32`` (no class body is walked for it); ``source``, the file's bytes (a
    class's lines are searched for ``float32`` instead of walking its body)."""
    reads = []
    for stmt in tree.body if functions else ():
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if called is not None:
                args = stmt.args
                if not any(a.arg in called for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]):
                    continue
            found = _reads(stmt)
            if found:
                reads.append((stmt.name, found))
    if classes is None:
        classes = bool(reads)
    if source is not None:
        float32_text = float32_text and MAY_BE_FLOAT32.search(source) is not None
    lines = source.splitlines() if source is not None and float32_text and classes else None
    shapes = [_class(stmt, imports, float32_text, lines) for stmt in tree.body if isinstance(stmt, ast.ClassDef)] \
        if classes else []
    return StructuralSummary(tuple(shapes), tuple(reads))


# -- the project's records ------------------------------------------------------------------------------
def _shapes(summaries: Mapping[str, StructuralSummary], keras_class: Callable[[str, str], bool],
            base_of: Callable[[str, str], tuple[str, str] | None]):
    """The ``ClassShape`` of every class that defines (or inherits) a name some function reads, and the
    ``inherited(ref)`` lookup behind them; None where there is no class or no read."""
    by_ref = {(path, c.name): c for path, s in summaries.items() for c in s.classes}
    if not by_ref or not any(s.reads for s in summaries.values()):
        return None
    defines: dict[tuple[str, str], frozenset[str]] = {}

    def inherited(ref: tuple[str, str], depth: int = 0) -> frozenset[str]:
        if ref not in defines:
            defines[ref] = by_ref[ref].defines  # cycles
            found = set(by_ref[ref].defines)
            for base in by_ref[ref].bases:
                parent = base_of(ref[0], base)
                if parent is not None and parent in by_ref and parent != ref and depth < 8:
                    found |= inherited(parent, depth + 1)
            defines[ref] = frozenset(found)
        return defines[ref]

    read = {a for s in summaries.values() for _, params in s.reads for _, attrs in params for a in attrs}
    shapes = []
    for ref, summary in by_ref.items():
        names = inherited(ref)
        if names.isdisjoint(read):
            continue  # defines nothing a function reads: neither evidence nor a rival (no base resolution)
        keras = keras_class(*ref)
        shapes.append(ClassShape(summary.name, names, keras, keras and not summary.spells_float32))
    return shapes, inherited


def has_float16_shape(summaries: Mapping[str, StructuralSummary], keras_class: Callable[[str, str], bool],
                      base_of: Callable[[str, str], tuple[str, str] | None]) -> bool:
    """Some class defining a name a function reads is a float16 Keras class (else ``records`` is empty)."""
    shaped = _shapes(summaries, keras_class, base_of)
    return shaped is not None and any(s.float16 for s in shaped[0])


def records(summaries: Mapping[str, StructuralSummary], keras_class: Callable[[str, str], bool],
            base_of: Callable[[str, str], tuple[str, str] | None]) -> dict[str, frozenset[CrossCall]]:
    """``CrossCall(function, PLAIN, ((param, KERAS_INSTANCE),))`` for each module function's parameter that the
    project's classes type as a float16 Keras instance (``NOT_KERAS`` for one its own file's classes would type
    but the project's do not). ``keras_class(path, name)``: a Keras layer/model class
    (bases resolved through the project); ``base_of(path, dotted)``: the project class a base names, or None."""
    shaped = _shapes(summaries, keras_class, base_of)
    if shaped is None or not any(s.float16 for s in shaped[0]):
        return {}
    shapes, inherited = shaped
    index = class_index(shapes)
    found: dict[str, frozenset[CrossCall]] = {}
    for path, summary in summaries.items():
        # What this file's own classes define: where they could type a parameter the project does not, the
        # record says NOT_KERAS (the per-file pass sees only its file's classes; a rival elsewhere withdraws it).
        own = {n for c in summary.classes for n in inherited((path, c.name))} if summary.reads else set()
        calls = set()
        for function, params in summary.reads:
            reads = dict(params)
            typed = typed_parameters(reads, index)
            args = [(p, ArgKind.KERAS_INSTANCE if p in typed else ArgKind.NOT_KERAS) for p, attrs in sorted(reads.items())
                    if p in typed or any(a in index and a in own for a in attrs)]
            if args:
                calls.add(CrossCall(function, CallContext.PLAIN, tuple(args)))
        if calls:
            found[path] = frozenset(calls)
    return found
