"""Cross-file callers: which functions of a file other files call from float16 code, or hand a Keras model.

The dtype inference is per file: a function that only other files call is analysed nowhere
(tfexamples efficientdet ``utils.activation_fn``, called from layers' ``call`` in
``efficientdet_keras.py``; DELF's ``extract_global_descriptors_from_list(net, ...)``, handed a
``GlobalFeatureNet`` built in ``train.py``). This scan decides it from bindings and imports, not
from names: one ``ast`` parse of each scanned file (only where float16 can reach the project),
imports resolved to project files, classes resolved to Keras layers/models through their bases
(transitively through the project's own classes).

What it records (``CrossCall``, one per call site worth knowing, typed):
- a call of a module function of another file from ``call`` of a Keras layer class (and the
  methods ``call`` reaches through ``self.``) or from a Keras model's ``train_step``/``test_step``/
  ``predict_step``: the callee sees the caller's float16 activations, like an in-file helper;
- a call (any context, this file too) passing a parameter an instance of a project Keras
  layer/model class: a name bound to ``Cls(...)`` in the caller, or the caller's own parameter
  that received one (followed through the project's call chains).

A class whose own text spells ``float32`` (a ``dtype="float32"`` head, a cast) may return float32
under a policy: its instances are not recorded (unknown, not float16).
"""

from __future__ import annotations

import ast
import gc
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from mpfix import safe_read
from mpfix.project.crosscall_records import ArgKind, CallContext, CrossCall

_MAX_BYTES = 2_000_000
_CALL = re.compile(rb"\b([A-Za-z_]\w*)[ \t]*\(")
# Keras base classes whose subclasses' ``call`` runs under the compute dtype (resolved spellings,
# ``tensorflow.`` and ``tf_keras`` normalised to ``keras``).
KERAS_LAYER_BASES = ("keras.layers.", "keras.Model", "keras.Layer", "keras.Sequential", "keras.models.Model",
                     "keras.models.Sequential", "keras.engine.base_layer.Layer", "keras.src.layers.",
                     "keras.src.models.", "keras.src.engine.base_layer.")
KERAS_MODEL_HOOKS = frozenset({"train_step", "test_step", "predict_step"})


@dataclass
class _Site:
    target: tuple[str, str]  # (module reference as imported/resolved path, function name)
    context: CallContext
    caller: str | None  # the enclosing module function (for passing Keras parameters on)
    positional: list[ast.expr]
    keywords: dict[str, ast.expr]
    bound: dict[str, ast.expr]  # the caller's names bound to a call (`net = Delf()`)
    line: int = 0  # where the call is
    flow: "_Flow | None" = None  # float16 contexts: the caller's assignments, to tell its activations


@dataclass
class _File:
    path: str
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted target
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    sites: list[_Site] = field(default_factory=list)
    called: frozenset[str] = frozenset()  # every name called in the file (`Name(`), from its bytes
    plain_done: bool = False


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _normal(name: str) -> str:
    for prefix, to in (("tensorflow.python.keras.", "keras."), ("tensorflow.keras.", "keras."), ("tf_keras.", "keras."),
                       ("tensorflow.compat.v2.keras.", "keras."), ("tensorflow.compat.v1.keras.", "keras.")):
        if name.startswith(prefix):
            return to + name[len(prefix):]
    return name


class _Scanner(ast.NodeVisitor):
    def __init__(self, file: _File, module: str) -> None:
        self.file = file
        self.module = module  # dotted module name (for relative imports)

    def scan(self, tree: ast.Module) -> None:
        """Module-level imports (also under ``try``/``if``), classes and functions: no walk of bodies."""
        queue = list(tree.body)
        while queue:
            node = queue.pop()
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.file.imports[alias.asname or alias.name.split(".")[0]] = \
                        alias.name if alias.asname else alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = self.module.split(".")[:-node.level] if self.module else []
                    base = ".".join([*parent, *([base] if base else [])])
                for alias in node.names:
                    if alias.name != "*":
                        self.file.imports[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                queue.extend(node.body)
                queue.extend(getattr(node, "orelse", ()))
                queue.extend(getattr(node, "finalbody", ()))
                for handler in getattr(node, "handlers", ()):
                    queue.extend(handler.body)
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                self.file.classes[stmt.name] = stmt
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.file.functions[stmt.name] = stmt

    def resolve(self, node: ast.expr) -> str | None:
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        target = self.file.imports.get(head)
        if target is None:
            return None
        return _normal(f"{target}.{rest}" if rest else target)


def _module_name(path: str, root: str) -> str:
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


@dataclass
class _Flow:
    """A float16 context's parameters (its autocast inputs) and assignments (name -> (line, value), in order)."""

    params: frozenset[str]
    assigned: dict[str, list[tuple[int, ast.expr]]]

    def reaching(self, name: str, line: int) -> ast.expr | None | bool:
        """The value ``name`` last got before ``line`` (source order, like the inference's ``dtype_at``);
        True: the parameter itself; None: unbound here."""
        before = [value for at, value in self.assigned.get(name, ()) if at < line]
        if before:
            return before[-1]
        return True if name in self.params else None


class CrossCallScan:
    """The scan of one project: ``calls_of(path)`` after ``run()``."""

    def __init__(self, root: Path, files: tuple[Path, ...]) -> None:
        self.root = str(root)
        self.files = [str(f) for f in files if str(f).endswith(".py")]
        self.parsed: dict[str, _File] = {}
        self.by_suffix: dict[str, list[str]] = {}  # dotted suffix -> paths (`utils`, `efficientdet.utils`)
        for path in self.files:
            parts = _module_name(path, self.root).split(".")
            for i in range(len(parts)):
                self.by_suffix.setdefault(".".join(parts[i:]), []).append(path)
        self._layer: dict[tuple[str, str], bool] = {}
        self.found: dict[str, set[CrossCall]] = {}

    # -- files and names ----------------------------------------------------------
    def _file(self, path: str) -> _File | None:
        if path in self.parsed:
            return self.parsed[path]
        self.parsed[path] = None  # type: ignore[assignment]  # recursion guard, unreadable files
        try:
            data = safe_read.read_bytes(path, _MAX_BYTES)
            tree = ast.parse(data)
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        file = _File(path, called=frozenset(n.decode("ascii", "replace") for n in _CALL.findall(data)))
        scanner = _Scanner(file, _module_name(path, self.root))
        scanner.scan(tree)
        self.parsed[path] = file
        return file

    def _module_path(self, dotted: str, near: str) -> str | None:
        """The project file a dotted module name names (the one nearest ``near`` when several do)."""
        found = self.by_suffix.get(dotted)
        if not found:
            return None
        if len(found) == 1:
            return found[0]
        return max(found, key=lambda p: len(os.path.commonpath([p, near])))

    def _symbol(self, dotted: str, near: str, depth: int = 0) -> tuple[str, str] | None:
        """``pkg.mod.name`` -> (path of pkg/mod.py, ``name``) when a project file defines it."""
        module, _, name = dotted.rpartition(".")
        if not module or depth > 8:  # a chain (or cycle) of re-exports
            return None
        path = self._module_path(module, near)
        if path is None:
            return None
        file = self._file(path)
        if file is not None and name not in file.classes and name not in file.functions and name in file.imports:
            return self._symbol(file.imports[name], path, depth + 1)  # re-exported (`from .utils import fn` in __init__)
        return (path, name)

    def _class(self, file: _File, node: ast.expr) -> tuple[str, str] | None:
        """The project class ``node`` names in ``file`` (a local one, or one imported from the project)."""
        if isinstance(node, ast.Name) and node.id in file.classes:
            return (file.path, node.id)
        dotted = _Scanner(file, "").resolve(node)
        return self._symbol(dotted, file.path) if dotted else None

    def is_keras_class(self, ref: tuple[str, str], depth: int = 0) -> bool:
        """A project class whose bases resolve to a Keras layer or model (through project classes)."""
        if ref in self._layer:
            return self._layer[ref]
        self._layer[ref] = False  # recursion guard
        file = self._file(ref[0])
        cls = file.classes.get(ref[1]) if file is not None else None
        result = False
        if cls is not None and depth < 8:
            for base in cls.bases:
                resolved = _Scanner(file, "").resolve(base) or ""
                if resolved.startswith(KERAS_LAYER_BASES) or resolved in ("keras.Model", "keras.Layer"):
                    result = True
                else:
                    parent = self._class(file, base)
                    result = parent is not None and parent != ref and self.is_keras_class(parent, depth + 1)
                if result:
                    break
        self._layer[ref] = result
        return result

    def _float16_instance(self, ref: tuple[str, str]) -> bool:
        """A project Keras class whose outputs follow the compute dtype: its text never spells float32."""
        if not self.is_keras_class(ref):
            return False
        file = self._file(ref[0])
        cls = file.classes[ref[1]]
        return not any(isinstance(n, ast.Constant) and n.value == "float32" or
                       isinstance(n, ast.Attribute) and n.attr == "float32" for n in ast.walk(cls))

    # -- call sites ----------------------------------------------------------------
    def _float16_sites(self, file: _File, scanner: _Scanner) -> None:
        """Calls from a Keras layer's ``call`` (and the methods it reaches) and a Keras model's steps."""
        for name, cls in file.classes.items():
            if not self.is_keras_class((file.path, name)):
                continue
            methods = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
            reached = self._reached_from(methods, "call")
            for method_name, method in methods.items():
                if method_name in reached:
                    self._collect(file, scanner, method, CallContext.LAYER_CALL, None)
                elif method_name in KERAS_MODEL_HOOKS:
                    self._collect(file, scanner, method, CallContext.TRAIN_STEP, None)

    def _helper_sites(self, scanned: list[_File], hops: int = 3) -> None:
        """A module function another file's float16 code calls with its activations runs on them too: its own
        calls of a third file's functions are float16 calls (``CallContext.HELPER``), with those parameters as
        its activations; ``hops`` files deep."""
        walked: set[tuple[str, str]] = set()
        frontier = [(file, file.sites) for file in scanned]
        for _ in range(hops):
            active: dict[tuple[str, str], set[str]] = {}
            for file, sites in frontier:
                for site in sites:
                    if site.context.float16 and site.target[0] != file.path:
                        args = self._args(file, site, set()) or ()
                        tensors = {name for name, kind in args if kind is ArgKind.TENSOR}
                        if tensors:
                            active.setdefault(site.target, set()).update(tensors)
            frontier = []
            for (path, name), params in active.items():
                callee = self._file(path)
                if (path, name) in walked or callee is None or name not in callee.functions:
                    continue
                walked.add((path, name))
                before = len(callee.sites)
                self._collect(callee, _Scanner(callee, _module_name(path, self.root)), callee.functions[name],
                              CallContext.HELPER, name, frozenset(params))
                new = [s for s in callee.sites[before:] if s.target[0] != path]
                callee.sites[before:] = new  # its same-file calls the inference follows itself
                if new:
                    frontier.append((callee, new))  # only the new sites are the next hop's callers
                    if callee not in scanned:
                        scanned.append(callee)

    def _plain_sites(self, file: _File, scanner: _Scanner) -> None:
        """Calls from the file's module functions (where a Keras instance may be handed on)."""
        file.plain_done = True
        for name, func in file.functions.items():
            self._collect(file, scanner, func, CallContext.PLAIN, name)

    @staticmethod
    def _reached_from(methods: dict, start: str) -> set[str]:
        reached, queue = set(), [start]
        while queue:
            name = queue.pop()
            if name in reached or name not in methods:
                continue
            reached.add(name)
            for node in ast.walk(methods[name]):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                    queue.append(node.func.attr)
        return reached

    def _collect(self, file: _File, scanner: _Scanner, func, context: CallContext, caller: str | None,
                 active: frozenset[str] | None = None) -> None:
        """The calls of project functions in ``func``; ``active``: the parameters that hold float16 activations
        (None: every parameter, a layer's ``call``)."""
        bound: dict[str, ast.expr] = {}
        calls: list[ast.Call] = []
        assigned: dict[str, list[tuple[int, ast.expr]]] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, ast.Call):
                bound[node.targets[0].id] = node.value.func
            if isinstance(node, ast.Call):
                calls.append(node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)) and context.float16:
                value = node.iter if isinstance(node, ast.For) else node.value
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    names = [target] if isinstance(target, ast.Name) else \
                        [e for e in target.elts if isinstance(e, ast.Name)] if isinstance(target, (ast.Tuple, ast.List)) \
                        else []
                    if names and not isinstance(target, ast.Name) and self._project_call(file, scanner, value):
                        # `rois, targets = sample(boxes, gt)`: a project function's several results are its own
                        # (labels, indices, targets), not the activations it was handed.
                        value = ast.copy_location(ast.Constant(None), node)
                    elif isinstance(node, ast.AugAssign) and isinstance(target, ast.Name):
                        value = ast.copy_location(ast.BinOp(left=ast.Name(target.id), op=node.op, right=value), node)  # x and v
                    for name in names:
                        if value is not None:
                            assigned.setdefault(name.id, []).append((node.lineno, value))
        flow = None
        if context.float16:
            params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]} - {"self", "cls"}
            params = params if active is None else params & active
            for values in assigned.values():
                values.sort(key=lambda pair: pair[0])
            flow = _Flow(frozenset(params), assigned)
        for call in calls:
            if isinstance(call.func, ast.Name) and call.func.id in file.functions:
                target = (file.path, call.func.id)
            else:
                dotted = scanner.resolve(call.func)
                target = self._symbol(dotted, file.path) if dotted else None
            if target is None:
                continue
            file.sites.append(_Site(target, context, caller, [a for a in call.args],
                                    {k.arg: k.value for k in call.keywords if k.arg}, bound, call.lineno, flow))

    def _project_call(self, file: _File, scanner: _Scanner, value: ast.expr) -> bool:
        if not isinstance(value, ast.Call):
            return False
        func = value.func
        if isinstance(func, ast.Name) and func.id in file.functions:
            return True
        dotted = scanner.resolve(func)
        return dotted is not None and self._symbol(dotted, file.path) is not None

    def _float32(self, file: _File, value: ast.expr) -> bool:
        """``tf.cast(x, tf.float32)``, ``tf.zeros(shape, dtype="float32")``: a float32 tensor."""
        if not isinstance(value, ast.Call):
            return False
        dtype = value.args[1] if len(value.args) > 1 else next(
            (k.value for k in value.keywords if k.arg == "dtype"), None)
        spelled = (_Scanner(file, "").resolve(dtype) or "") if dtype is not None else ""
        return spelled.startswith(("tensorflow.", "numpy.")) and spelled.endswith(".float32") or \
            isinstance(dtype, ast.Constant) and dtype.value == "float32"

    def _computes(self, file: _File, flow: _Flow, value: ast.expr, line: int, depth: int = 0) -> bool | None:
        """``value``, evaluated at ``line`` of a layer's ``call`` (or a train step), holds its float16 activations:
        computed by ops from its inputs (autocast). False: a float32 cast; None: not decided here (a sublayer's
        output, whose own code decides its dtype; an attribute such as ``x.shape``; a constant)."""
        if depth > 12 or isinstance(value, (ast.Constant, ast.Attribute, ast.Lambda)):
            return None
        if isinstance(value, ast.Name):
            reaching = flow.reaching(value.id, line)
            if reaching is True:
                return True
            if reaching is None:
                return None
            return self._computes(file, flow, reaching, getattr(reaching, "lineno", line), depth + 1)
        if isinstance(value, ast.Call):
            func = value.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
                return None  # a sublayer's (or method's) output: its own code decides (a float32 head, a cast)
            if self._float32(file, value):
                return False
            found = [self._computes(file, flow, a, line, depth + 1) for a in [*value.args, *(k.value for k in value.keywords)]]
            return True if True in found else None
        found = [self._computes(file, flow, child, line, depth + 1) for child in ast.iter_child_nodes(value)
                 if isinstance(child, ast.expr)]
        return True if True in found else None

    # -- the answer ------------------------------------------------------------------
    def _kind(self, file: _File, site: _Site, value: ast.expr, keras_params: set[tuple[str, str]]) -> ArgKind:
        if isinstance(value, ast.Constant):
            return ArgKind.NUMBER
        if isinstance(value, ast.Name):
            if site.caller is not None and (file.path, f"{site.caller}.{value.id}") in keras_params:
                return ArgKind.KERAS_INSTANCE
            built = site.bound.get(value.id)
            if built is not None:
                ref = self._class(file, built)
                if ref is not None and self._float16_instance(ref):
                    return ArgKind.KERAS_INSTANCE
        if self._float32(file, value):
            return ArgKind.FLOAT32
        if site.flow is not None:
            reaching = site.flow.reaching(value.id, site.line) if isinstance(value, ast.Name) else None
            if reaching is not None and reaching is not True and self._float32(file, reaching):
                return ArgKind.FLOAT32
            if self._computes(file, site.flow, value, site.line):
                return ArgKind.TENSOR
        return ArgKind.UNKNOWN

    def _args(self, file: _File, site: _Site, keras_params: set) -> tuple[tuple[str, ArgKind], ...] | None:
        callee_file = self._file(site.target[0])
        func = callee_file.functions.get(site.target[1]) if callee_file is not None else None
        if func is None:
            return None
        names = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
        found = []
        for i, value in enumerate(site.positional):
            if isinstance(value, ast.Starred) or i >= len(names):
                break
            found.append((names[i], self._kind(file, site, value, keras_params)))
        known = set(names) | {a.arg for a in func.args.kwonlyargs}
        found += [(k, self._kind(file, site, v, keras_params)) for k, v in site.keywords.items() if k in known]
        return tuple(found)

    def run(self) -> dict[str, frozenset[CrossCall]]:
        scanned = [f for f in (self._file(p) for p in self.files) if f is not None]
        scanners = {f.path: _Scanner(f, _module_name(f.path, self.root)) for f in scanned}
        keras_names = {name for f in scanned for name in f.classes if self.is_keras_class((f.path, name))}
        for file in scanned:
            self._float16_sites(file, scanners[file.path])
        # Module functions are walked only in files that call a project Keras class by name (bytes: cheap),
        # then in the files those hand an instance to, and so on (train -> epoch -> step).
        pending = [f for f in scanned if f.called & keras_names]
        keras_params: set[tuple[str, str]] = set()  # (path, "function.param") that receives a Keras instance
        for _ in range(6):
            for file in pending:
                if not file.plain_done:
                    self._plain_sites(file, scanners[file.path])
            before = len(keras_params)
            for file in scanned:
                for site in file.sites:
                    args = self._args(file, site, keras_params) or ()
                    keras_params.update((site.target[0], f"{site.target[1]}.{n}") for n, k in args
                                        if k is ArgKind.KERAS_INSTANCE)
            targets = {path for path, _ in keras_params}
            pending = [f for f in scanned if f.path in targets and not f.plain_done]
            if len(keras_params) == before and not pending:
                break
        self._helper_sites(scanned)
        found: dict[str, set[CrossCall]] = {}
        for file in scanned:
            for site in file.sites:
                cross = site.target[0] != file.path
                args = self._args(file, site, keras_params)
                if args is None:
                    continue
                keras = any(k is ArgKind.KERAS_INSTANCE for _, k in args)
                if (site.context.float16 and cross) or keras:
                    context = site.context if cross else CallContext.PLAIN
                    found.setdefault(site.target[0], set()).add(CrossCall(site.target[1], context, args))
        return {path: frozenset(calls) for path, calls in found.items()}


def cross_calls(root: Path, files: tuple[Path, ...]) -> dict[str, frozenset[CrossCall]]:
    """For each file of the project: the calls other files make of its functions from float16 code,
    and the calls anywhere that hand its functions a Keras layer/model instance (absolute path -> calls)."""
    # The project's syntax trees are alive together: the cyclic collector would traverse them again and
    # again while they are built (4x the parse time on tf-models). They hold no cycles; refcounts free them.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return CrossCallScan(root, files).run()
    finally:
        if enabled:
            gc.enable()
