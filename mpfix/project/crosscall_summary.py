"""One file as the cross-file scan sees it: a small typed summary built in ONE ``ast`` pass, the tree dropped.

``summarise(path, data, module, is_project_module)`` parses the file once and keeps only what the scan
(``mpfix.project.crosscalls``) and the structural queries (``mpfix.project.crosscall_structure``) read:
- imports (local name -> dotted target), top-level classes (bases as a local class name and/or a resolved
  dotted name, method names, the methods ``call`` reaches through ``self.``), top-level functions (parameter
  names); structural typing's summary of the same tree (``mpfix.project.structural.summarize``: what each
  class defines, the attribute names read on module functions' parameters);
- the call sites the scan may need (``Site``): calls of the file's own functions or of a project module's
  names from the methods of a class with bases (``call`` and what it reaches, the model steps) and from
  module functions. Their arguments stay as the small ``ast`` expressions the scan judges; the rest of
  the tree is freed when ``summarise`` returns.

What a site's target resolves to, whether a class is a Keras class, are cross-file questions: the
summary keeps the dotted names, the scan answers them over every file's summary.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Callable

from mpfix.project.crosscall_records import CallContext
from mpfix.keras_spellings import fold_keras
from mpfix.project import structural
from mpfix.project.structural import StructuralSummary, dotted_name
from mpfix.project.call_pattern import CALL
from mpfix.project.signatures import signature_float32

KERAS_MODEL_HOOKS = frozenset({"train_step", "test_step", "predict_step"})
# Keras base classes whose subclasses' ``call`` runs under the compute dtype (resolved spellings,
# ``tensorflow.`` and ``tf_keras`` folded to ``keras``: ``mpfix.keras_spellings``).
KERAS_LAYER_BASES = ("keras.layers.", "keras.Model", "keras.Layer", "keras.Sequential", "keras.models.Model",
                     "keras.models.Sequential", "keras.engine.base_layer.Layer", "keras.src.layers.",
                     "keras.src.models.", "keras.src.engine.base_layer.")


@dataclass(frozen=True)
class Ref:
    """A name in an expression as the file spells it: a class of this file (``local``) and/or the
    dotted target its imports resolve it to (``tensorflow.keras.layers.Layer`` folded to ``keras.…``)."""

    local: str | None
    dotted: str | None


@dataclass(frozen=True)
class ClassSummary:
    name: str
    bases: tuple[Ref, ...]
    methods: frozenset[str]
    reached_from_call: frozenset[str]  # ``call`` and the methods it reaches through ``self.``
    line: int


@dataclass(frozen=True)
class FunctionSummary:
    name: str
    params: tuple[str, ...]  # positional (posonly + args), in order
    kwonly: tuple[str, ...]
    line: int


@dataclass
class Flow:
    """A float16 context's parameters (its autocast inputs) and assignments, in source order:
    name -> [(line, value, dotted)]: ``dotted`` set where a tuple target gets a call of that project name
    (``rois, targets = sample(...)``: the scan reads such a value as the project function's own results)."""

    params: frozenset[str]
    assigned: dict[str, list[tuple[int, ast.expr, str | None]]]


@dataclass
class Site:
    """One call of a project name (a function of this file, or a dotted name of a project module)."""

    target: str  # the local function name (``local``) or the dotted name to resolve
    local: bool
    context: CallContext
    caller: str | None  # the enclosing module function (for passing Keras parameters on)
    positional: list[ast.expr]
    keywords: dict[str, ast.expr]
    bound: dict[str, Ref]  # the caller's names bound to a call (`net = Delf()`): the callable's Ref
    line: int = 0
    flow: Flow | None = None
    float32: frozenset[str] = frozenset()  # the caller's parameters its input_signature makes float32 (``signatures``)


@dataclass
class FileSummary:
    path: str
    module: str
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted target
    classes: dict[str, ClassSummary] = field(default_factory=dict)
    functions: dict[str, FunctionSummary] = field(default_factory=dict)
    called: frozenset[str] = frozenset()  # every name called in the file (`Name(`), from its bytes
    # Sites gathered in the one pass: per class name its float16 sites (used if the class is a Keras
    # class); the module functions' plain sites (used once the scan walks the file's functions).
    class_sites: dict[str, list[Site]] = field(default_factory=dict)
    plain_sites: list[Site] = field(default_factory=list)
    plain_collected: bool = False  # False: the module functions' sites were not gathered (read again if needed)
    # ``class_dtypes.class_dtypes`` of the file's text, read again once asked; None: not yet.
    class_dtypes: dict[str, tuple[bool, bool]] | None = None
    # Structural typing's view of the file (``mpfix.project.structural``: class definitions, attribute reads
    # on module functions' parameters), made from the same tree.
    structural: StructuralSummary | None = None

    def resolve(self, node: ast.expr) -> str | None:
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        target = self.imports.get(head)
        if target is None:
            return None
        return fold_keras(f"{target}.{rest}" if rest else target)

    def ref(self, node: ast.expr) -> Ref:
        local = node.id if isinstance(node, ast.Name) and node.id in self.classes else None
        return Ref(local, self.resolve(node))


def _imports(summary: FileSummary, tree: ast.Module) -> None:
    """Module-level imports (also under ``try``/``if``/``with``)."""
    queue = list(tree.body)
    while queue:
        node = queue.pop()
        if isinstance(node, ast.Import):
            for alias in node.names:
                summary.imports[alias.asname or alias.name.split(".")[0]] = \
                    alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = summary.module.split(".")[:-node.level] if summary.module else []
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                if alias.name != "*":
                    summary.imports[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            queue.extend(node.body)
            queue.extend(getattr(node, "orelse", ()))
            queue.extend(getattr(node, "finalbody", ()))
            for handler in getattr(node, "handlers", ()):
                queue.extend(handler.body)


def _bfs(root: ast.AST) -> list[ast.AST]:
    """``ast.walk``'s nodes in ``ast.walk``'s order (breadth first), without its generators, and without the
    ``ctx`` markers (``Load``/``Store``), which no pass here reads."""
    return structural.breadth_first(root)


def _reached_from(methods: dict, start: str, walks: dict[str, list[ast.AST]]) -> set[str]:
    """The methods ``start`` reaches through ``self.`` calls; ``walks``: each one's ``_bfs``, kept for ``collect``."""
    reached, queue = set(), [start]
    while queue:
        name = queue.pop()
        if name in reached or name not in methods:
            continue
        reached.add(name)
        nodes = walks[name] = _bfs(methods[name])
        for node in nodes:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                queue.append(node.func.attr)
    return reached


_ASSIGNING = frozenset({ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For})  # what binds a name in a float16 flow


class _Collector:
    """The call sites of one function body (one ``ast.walk``), as the scan needs them."""

    def __init__(self, summary: FileSummary, is_project_module: Callable[[str], bool]) -> None:
        self.summary = summary
        self.is_project_module = is_project_module

    def project_target(self, func: ast.expr) -> tuple[str, bool] | None:
        """(name, local) for a call of a function of this file or of a name in a project module."""
        if isinstance(func, ast.Name) and func.id in self.summary.functions:
            return func.id, True
        dotted = self.summary.resolve(func)
        if dotted is None or not self.is_project_module(dotted.rpartition(".")[0]):
            return None
        return dotted, False

    def collect(self, func, context: CallContext, caller: str | None, active: frozenset[str] | None = None,
                nodes: list[ast.AST] | None = None, method: bool = False) -> list[Site]:
        """The calls of project functions in ``func``; ``active``: the parameters that hold float16
        activations (None: every parameter, a layer's ``call``); ``nodes``: ``_bfs(func)`` where made already."""
        bound: dict[str, Ref] = {}
        calls: list[ast.Call] = []
        assigned: dict[str, list[tuple[int, ast.expr, str | None]]] = {}
        float16 = context.float16
        # Exact types (``ast.parse`` makes no subclass instances): one ``type`` per node instead of three isinstance.
        call, assign, name = ast.Call, ast.Assign, ast.Name
        for node in _bfs(func) if nodes is None else nodes:
            kind = type(node)
            if kind is call:
                calls.append(node)
                continue
            if kind is assign and len(node.targets) == 1 and type(node.targets[0]) is name \
                    and type(node.value) is call:
                bound[node.targets[0].id] = self.summary.ref(node.value.func)
            if float16 and kind in _ASSIGNING:
                self._assignment(node, assigned)
        flow = None
        if float16:
            params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]} - {"self", "cls"}
            params = params if active is None else params & active
            for values in assigned.values():
                values.sort(key=lambda entry: entry[0])
            flow = Flow(frozenset(params), assigned)
        sites = []
        float32 = signature_float32(func, self.summary.resolve, method) if func.decorator_list else frozenset()
        for call in calls:
            target = self.project_target(call.func)
            if target is None:
                continue
            sites.append(Site(target[0], target[1], context, caller, list(call.args),
                              {k.arg: k.value for k in call.keywords if k.arg}, bound, call.lineno, flow, float32))
        return sites

    def _assignment(self, node, assigned: dict) -> None:
        value = node.iter if isinstance(node, ast.For) else node.value
        dotted = None  # several targets (`a = b, c = f()`) see what the first tuple target made of the value
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            names = [target] if isinstance(target, ast.Name) else \
                [e for e in target.elts if isinstance(e, ast.Name)] if isinstance(target, (ast.Tuple, ast.List)) \
                else []
            if names and not isinstance(target, ast.Name) and isinstance(value, ast.Call) and dotted is None:
                # `rois, targets = sample(boxes, gt)`: a project function's several results are its own
                # (labels, indices, targets), not the activations it was handed; the scan decides whether
                # the callee is a project function (``dotted``; a function of this file: decided here).
                found = self.project_target(value.func)
                if found is not None and found[1]:
                    value = ast.copy_location(ast.Constant(None), node)
                elif found is not None:
                    dotted = found[0]
            elif isinstance(node, ast.AugAssign) and isinstance(target, ast.Name):
                value = ast.copy_location(ast.BinOp(left=ast.Name(target.id), op=node.op, right=value), node)
            for name in names:
                if value is not None:
                    assigned.setdefault(name.id, []).append((node.lineno, value, dotted))


def hands_callable(value: ast.expr) -> ast.expr | None:
    """What a callable argument calls: ``lambda x: net(x)`` -> ``net``; ``self._model.call`` -> ``self._model``."""
    if isinstance(value, ast.Lambda) and isinstance(value.body, ast.Call):
        return value.body.func
    if isinstance(value, ast.Attribute) and value.attr in ("call", "__call__"):
        return value.value
    return None


# Where a callable may be handed on: a lambda, or a bound ``.call``/``.__call__`` passed as an argument (two
# literal-led patterns: one alternation starting at every `.` costs 6x more on tf-models' bytes).
_HANDS_CALLABLE = (re.compile(rb"lambda\b"), re.compile(rb"call(?:(?<=\.call)\s*[,)]|__(?<=\.__call__)\s*[,)])"))


def _callable_sites(collector: _Collector, data: bytes, class_nodes: dict[str, ast.ClassDef],
                    keras: set[str]) -> list[Site]:
    """Calls of project functions from the methods of a class that may not be a Keras class (an exporter's
    ``tf.Module``) that hand on a callable (``hands_callable``): the scan asks whether it runs a project Keras
    instance. Only methods whose lines hold such an argument (``_HANDS_CALLABLE``, on the bytes) are walked; a
    site's ``bound`` holds the class's ``self.x = Cls(...)`` attributes (bound once, in its methods' statements) as
    ``self.x``."""
    rows = [data.count(b"\n", 0, m.start()) + 1 for pattern in _HANDS_CALLABLE for m in pattern.finditer(data)]
    if not rows:
        return []
    sites: list[Site] = []
    for name, cls in class_nodes.items():
        if name in keras or not any(cls.lineno <= row <= (cls.end_lineno or cls.lineno) for row in rows):
            continue
        methods = [m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        walked = [m for m in methods if any(m.lineno <= row <= (m.end_lineno or m.lineno) for row in rows)]
        if not walked:
            continue
        attrs: dict[str, list[ast.expr]] = {}
        statements = [stmt for m in methods for stmt in m.body]
        while statements:
            stmt = statements.pop()
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and \
                            target.value.id == "self":
                        attrs.setdefault(target.attr, []).append(stmt.value)
            elif isinstance(stmt, (ast.If, ast.With, ast.Try, ast.For, ast.While)):
                statements += [*stmt.body, *getattr(stmt, "orelse", ()), *getattr(stmt, "finalbody", ()),
                               *(s for handler in getattr(stmt, "handlers", ()) for s in handler.body)]
        held = {f"self.{attr}": collector.summary.ref(values[0].func) for attr, values in attrs.items()
                if len(values) == 1 and isinstance(values[0], ast.Call)}
        for method in walked:
            for site in collector.collect(method, CallContext.PLAIN, None, method=True):
                if any(hands_callable(v) is not None for v in [*site.positional, *site.keywords.values()]):
                    site.bound = {**held, **site.bound}
                    sites.append(site)
    return sites


def keras_base(dotted: str) -> bool:
    """A resolved base spelling that names a Keras layer or model."""
    return dotted.startswith(KERAS_LAYER_BASES) or dotted in ("keras.Model", "keras.Layer")


def _may_be_keras(bases: tuple[Ref, ...], is_project_module: Callable[[str], bool]) -> bool:
    """A Keras base, or a base the project may define (a class of this file, a name of a project module):
    what ``CrossCallScan.is_keras_class`` needs to answer yes."""
    return any(ref.local is not None or ref.dotted is not None and
               (keras_base(ref.dotted) or is_project_module(ref.dotted.rpartition(".")[0])) for ref in bases)


def summarise(path: str, data: bytes, module: str, is_project_module: Callable[[str], bool],
              sites: bool = True, plain: Callable[[frozenset[str]], bool] | None = None,
              called: frozenset[str] | None = None) -> FileSummary | None:
    """The summary of one file (None: it does not parse); ``sites``: gather its call sites too (its module
    functions' only where ``plain(called)`` says a later pass may walk them; else the scan reads them again)."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if called is None:
        called = frozenset(n.decode("ascii", "replace") for n in CALL.findall(data))
    summary = FileSummary(path, module, called=called)
    _imports(summary, tree)
    class_nodes: dict[str, ast.ClassDef] = {}
    function_nodes: dict[str, ast.FunctionDef] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            class_nodes[stmt.name] = stmt
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function_nodes[stmt.name] = stmt
    # Names first (a site's ``Ref`` asks whether a name is a class of this file).
    summary.classes = dict.fromkeys(class_nodes)  # type: ignore[assignment]
    summary.functions = dict.fromkeys(function_nodes)  # type: ignore[assignment]
    collector = _Collector(summary, is_project_module)
    classes, functions = {}, {}
    maybe_keras: set[str] = set()
    for name, cls in class_nodes.items():
        methods = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        bases = tuple(summary.ref(b) for b in cls.bases)
        keras = _may_be_keras(bases, is_project_module)
        if keras:
            maybe_keras.add(name)
        walks: dict[str, list[ast.AST]] = {}
        reached = _reached_from(methods, "call", walks) if keras else set()
        classes[name] = ClassSummary(name, bases, frozenset(methods), frozenset(reached), cls.lineno)
        if sites and keras:
            found = []
            for method_name, method in methods.items():
                if method_name in reached:
                    found += collector.collect(method, CallContext.LAYER_CALL, None, nodes=walks[method_name],
                                               method=True)
                elif method_name in KERAS_MODEL_HOOKS:
                    found += collector.collect(method, CallContext.TRAIN_STEP, None, method=True)
            if found:
                summary.class_sites[name] = found
    summary.plain_collected = gather = sites and (plain is None or bool(plain(summary.called)))
    for name, func in function_nodes.items():
        args = func.args
        params = tuple(a.arg for a in [*args.posonlyargs, *args.args])
        kwonly = tuple(a.arg for a in args.kwonlyargs)
        if gather:
            summary.plain_sites += collector.collect(func, CallContext.PLAIN, name)
        functions[name] = FunctionSummary(name, params, kwonly, func.lineno)
    if gather:
        summary.plain_sites += _callable_sites(collector, data, class_nodes, maybe_keras)
    summary.classes, summary.functions = classes, functions
    summary.structural = structural.summarize(tree, summary.imports, called=called, source=data)
    return summary


def plain_sites(summary: FileSummary, data: bytes, is_project_module: Callable[[str], bool]) -> list[Site]:
    """The module functions' sites of a file ``summarise`` did not gather them for (its text read again)."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    nodes, class_nodes = {}, {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nodes[stmt.name] = stmt
        elif isinstance(stmt, ast.ClassDef):
            class_nodes[stmt.name] = stmt
    collector = _Collector(summary, is_project_module)
    maybe_keras = {name for name, cls in summary.classes.items() if _may_be_keras(cls.bases, is_project_module)}
    return [site for name, func in nodes.items() for site in collector.collect(func, CallContext.PLAIN, name)] + \
        _callable_sites(collector, data, class_nodes, maybe_keras)


def function_nodes(data: bytes) -> dict:
    """The top-level functions of a file's text by name (the last definition wins, like the summary's dict):
    a later pass walks their bodies."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    return {stmt.name: stmt for stmt in tree.body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))}
