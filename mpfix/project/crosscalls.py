"""Cross-file callers: which functions of a file other files call from float16 code, or hand a Keras model.

The dtype inference is per file: a function that only other files call is analysed nowhere
(tfexamples efficientdet ``utils.activation_fn``, called from layers' ``call`` in
``efficientdet_keras.py``; DELF's ``extract_global_descriptors_from_list(net, ...)``, handed a
``GlobalFeatureNet`` built in ``train.py``). This scan decides it from bindings and imports, not
from names, over small per-file summaries (``mpfix.project.crosscall_summary``: one ``ast`` pass per
file, the tree dropped at once): imports resolved to project files, classes resolved to Keras
layers/models through their bases (transitively through the project's own classes).

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
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mpfix import safe_read
from mpfix.project.class_dtypes import float16_class
from mpfix.project.crosscall_records import ArgKind, CallContext, CrossCall
from mpfix.project.call_pattern import CALL
from mpfix.project.file_records import Records, recording
from mpfix.project.crosscall_summary import (KERAS_LAYER_BASES, FileSummary, Flow, Ref, Site,
                                             hands_callable, keras_base, summarise)
from mpfix.project.structural import StructuralSummary, dotted_name

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

_MAX_BYTES = 2_000_000
_CHUNKS = 8  # the eager summaries go to helper processes in this many tasks
_UNSEEN = object()
__all__ = ["KERAS_LAYER_BASES", "CrossCallScan", "cross_calls", "scan_project"]


def _module_name(path: str, root: str) -> str:
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _reaching(flow: Flow, name: str, line: int):
    """The last assignment of ``name`` before ``line`` (source order, like the inference's ``dtype_at``):
    (value, project dotted); True: the parameter itself; None: unbound here."""
    before = [(value, dotted) for at, value, dotted in flow.assigned.get(name, ()) if at < line]
    if before:
        return before[-1]
    return True if name in flow.params else None


class CrossCallScan:
    """The scan of one project: ``run()`` answers, ``summaries`` keeps what it read of each file."""

    def __init__(self, root: Path, files: tuple[Path, ...]) -> None:
        self.root = str(root)
        self.files = [str(f) for f in files if str(f).endswith(".py")]
        self.scan_set = set(self.files)
        self.summaries: dict[str, FileSummary | None] = {}
        self.by_suffix: dict[str, list[str]] = {}  # dotted suffix -> paths (`utils`, `efficientdet.utils`)
        for path in self.files:
            parts = _module_name(path, self.root).split(".")
            for i in range(len(parts)):
                self.by_suffix.setdefault(".".join(parts[i:]), []).append(path)
        self._layer: dict[tuple[str, str], bool] = {}
        self._symbols: dict[str, tuple[str, str] | None] = {}
        self._sites: dict[str, list[Site]] = {}  # path -> the sites in play
        self._plain_done: set[str] = set()
        # Every top-level class with bases the scanned files define (from their bytes): a file that calls
        # none of them cannot hand a Keras instance on from its own bindings; its module functions are
        # walked only if a caller hands them one (read again then).
        self._class_names: set[str] = set()
        self._texts: dict[str, bytes] = {}  # scanned files read but not parsed yet
        self._static: dict[int, tuple | None] = {}  # id(site) -> its arguments judged once (``_judge``)
        self._finished = False  # after ``run``: a file read for ``structural_of`` needs no call sites
        self._called: dict[str, frozenset[str]] = {}
        self._records = Records(self.root)  # per-file summaries kept between runs (``file_records``)
        # and, once the later passes (held models) are done with the scan, the class dtypes they read
        weakref.finalize(self, self._records.save, self.summaries).atexit = False

    # -- files and names ----------------------------------------------------------
    def _read(self, path: str) -> bytes | None:
        try:
            return safe_read.read_bytes(path, _MAX_BYTES)
        except (OSError, ValueError):
            return None

    def _file(self, path: str) -> FileSummary | None:
        if path in self.summaries:
            return self.summaries[path]
        self.summaries[path] = None  # unreadable files (while it is summarised: a cycle of re-exports)
        self.summaries[path] = self._records.summarise(
            path, _module_name(path, self.root), path in self.scan_set and not self._finished, self._called.get(path),
            self._class_names, self.by_suffix.__contains__, lambda: self._texts.pop(path, None) or self._read(path))
        if self._finished:
            self._records.save(self.summaries)  # a file a later pass asks for (structural typing, held models)
        return self.summaries[path]

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

    def _target(self, file: FileSummary, site: Site) -> tuple[str, str] | None:
        if site.local:
            return (file.path, site.target)
        key = f"{file.path}\0{site.target}"
        if key not in self._symbols:
            self._symbols[key] = self._symbol(site.target, file.path)
        return self._symbols[key]

    def _class(self, file: FileSummary, ref: Ref) -> tuple[str, str] | None:
        """The project class ``ref`` names in ``file`` (a local one, or one imported from the project)."""
        if ref.local is not None:
            return (file.path, ref.local)
        return self._symbol(ref.dotted, file.path) if ref.dotted else None

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
                if keras_base(base.dotted or ""):
                    result = True
                else:
                    parent = self._class(file, base)
                    result = parent is not None and parent != ref and self.is_keras_class(parent, depth + 1)
                if result:
                    break
        self._layer[ref] = result
        return result

    def _float16_instance(self, ref: tuple[str, str]) -> bool:
        """A project Keras class whose outputs follow the compute dtype (``class_dtypes.float16_class``)."""
        return float16_class(self, ref)

    # -- what other project passes read (structural typing: ``mpfix.project.structural``) ---------
    def structural_of(self, path: str) -> StructuralSummary | None:
        """Structural typing's summary of a project file, from the scan's one parse (read now if the scan
        has not read it); None: unreadable or unparsable."""
        file = self._file(str(path))
        return file.structural if file is not None else None

    def parsed(self, path: str) -> bool:
        """The scan has parsed ``path`` already (``structural_of`` costs nothing more there)."""
        return self.summaries.get(str(path)) is not None

    def called_names(self, path: str) -> frozenset[str] | None:
        """Every name the file's bytes call (``name(``), where the scan read them."""
        return getattr(self, "_called", {}).get(str(path))

    def keras_class(self, path: str, name: str) -> bool:
        """A class of a scanned file whose bases resolve to a Keras layer or model (through project classes)."""
        return self.is_keras_class((str(path), name))

    # -- the eager summaries in helper processes -----------------------------------
    def _queue(self, pool: Executor | None, eager: list[str]) -> list[tuple[list[str], Future | None]]:
        """Hand the eager files' summaries to ``pool`` in chunks of about equal bytes (in file order).
        ``summarise`` is a function of its arguments, and they are the ones ``_file`` passes here
        (a scanned file, the scan not finished: sites gathered), so the summaries are the same."""
        if pool is None or len(eager) < _CHUNKS:
            return []
        modules, classes = frozenset(self.by_suffix), frozenset(self._class_names)
        target = sum(len(self._texts[p]) for p in eager) // _CHUNKS + 1
        chunks: list[list[str]] = [[]]
        size = 0
        for path in eager:
            if size >= target:
                chunks.append([])
                size = 0
            chunks[-1].append(path)
            size += len(self._texts[path])
        pending: list[tuple[list[str], Future | None]] = []
        for chunk in chunks:
            items = [(path, self._texts[path], None) for path in chunk]  # None: ``summarise`` finds its called names
            try:
                pending.append((chunk, pool.submit(_summaries, self.root, items, modules, classes)))
            except Exception:  # a broken pool: ``_file`` summarises them here
                pending.append((chunk, None))
        return pending

    def _collect(self, pending: list[tuple[list[str], Future | None]]) -> None:
        """The summaries the helper processes made; a chunk that failed (a process died, pickling a deep
        tree raised) is left to ``_file``, which computes the same here."""
        for chunk, future in pending:
            try:
                found = future.result() if future is not None else None
            except Exception:
                found = None
            if found is None:
                for path in chunk:
                    self._called[path] = _called_names(self._texts[path])
                continue
            for path, (summary, asked) in zip(chunk, found):
                self.summaries[path], data = summary, self._texts.pop(path)
                self._called[path] = called = summary.called if summary is not None else _called_names(data)
                gather = bool(self._class_names & called)  # what ``plain`` answered there
                self._records.keep_summary(path, _module_name(path, self.root), True, gather, asked, summary)

    # -- call sites ----------------------------------------------------------------
    def _float16_sites(self, file: FileSummary) -> None:
        """Calls from a Keras layer's ``call`` (and the methods it reaches) and a Keras model's steps."""
        sites = self._sites.setdefault(file.path, [])
        for name, found in file.class_sites.items():
            if self.is_keras_class((file.path, name)):
                sites.extend(found)
        file.class_sites = {}

    def _plain_sites(self, file: FileSummary) -> None:
        """Calls from the file's module functions (where a Keras instance may be handed on)."""
        self._plain_done.add(file.path)
        if not file.plain_collected:  # parsed again (or stored: ``file_records``)
            file.plain_sites = self._records.plain_sites(file, self._read, self.by_suffix.__contains__)
        self._sites.setdefault(file.path, []).extend(file.plain_sites)
        file.plain_sites = []

    def _helper_sites(self, order: list[str], hops: int = 3) -> None:
        """A module function another file's float16 code calls with its activations runs on them too: its own
        calls of a third file's functions are float16 calls (``CallContext.HELPER``), with those parameters as
        its activations; ``hops`` files deep."""
        walked: set[tuple[str, str]] = set()
        nodes: dict[str, dict] = {}
        frontier = [(self.summaries[path], self._sites[path]) for path in order if self._sites.get(path)]
        for _ in range(hops):
            active: dict[tuple[str, str], set[str]] = {}
            for file, sites in frontier:
                for site in sites:
                    target = self._target(file, site)
                    if site.context.float16 and target is not None and target[0] != file.path:
                        args = self._args(file, site, set()) or ()
                        tensors = {name for name, kind in args if kind is ArgKind.TENSOR}
                        if tensors:
                            active.setdefault(target, set()).update(tensors)
            frontier = []
            for (path, name), params in active.items():
                callee = self._file(path)
                if (path, name) in walked or callee is None or name not in callee.functions:
                    continue
                walked.add((path, name))
                # the file's module functions, parsed once for every hop (or stored: ``file_records``)
                collected = self._records.helper_sites(callee, name, frozenset(params), self._read,
                                                       self.by_suffix.__contains__, nodes)
                if collected is None:
                    continue
                # its same-file calls the inference follows itself
                new = [s for s in collected if (t := self._target(callee, s)) is not None and t[0] != path]
                self._sites.setdefault(path, []).extend(new)
                if new:
                    frontier.append((callee, new))  # only the new sites are the next hop's callers
                    if path not in order:
                        order.append(path)

    def _float32(self, file: FileSummary, value: ast.expr) -> bool:
        """``tf.cast(x, tf.float32)``, ``tf.zeros(shape, dtype="float32")``: a float32 tensor."""
        if not isinstance(value, ast.Call):
            return False
        dtype = value.args[1] if len(value.args) > 1 else next(
            (k.value for k in value.keywords if k.arg == "dtype"), None)
        spelled = (file.resolve(dtype) or "") if dtype is not None else ""
        return spelled.startswith(("tensorflow.", "numpy.")) and spelled.endswith(".float32") or \
            isinstance(dtype, ast.Constant) and dtype.value == "float32"

    def _value(self, file: FileSummary, entry) -> ast.expr | None:
        """An assignment's value; None where a tuple target takes a project function's results."""
        value, dotted = entry
        if dotted is not None and self._symbol(dotted, file.path) is not None:
            return None
        return value

    def _computes(self, file: FileSummary, flow: Flow, value: ast.expr, line: int, depth: int = 0) -> bool | None:
        """``value``, evaluated at ``line`` of a layer's ``call`` (or a train step), holds its float16 activations:
        computed by ops from its inputs (autocast). False: a float32 cast; None: not decided here (a sublayer's
        output, whose own code decides its dtype; an attribute such as ``x.shape``; a constant)."""
        if depth > 12 or isinstance(value, (ast.Constant, ast.Attribute, ast.Lambda)):
            return None
        if isinstance(value, ast.Name):
            reaching = _reaching(flow, value.id, line)
            if reaching is True:
                return True
            if reaching is None:
                return None
            found = self._value(file, reaching)
            if found is None:
                return None  # a project function's results (a constant in the old model)
            return self._computes(file, flow, found, getattr(found, "lineno", line), depth + 1)
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
    def _kind(self, file: FileSummary, site: Site, value: ast.expr, keras_params: set[tuple[str, str]]) -> ArgKind:
        if isinstance(value, ast.Constant):
            return ArgKind.NUMBER
        called = hands_callable(value)
        if called is not None:
            held = dotted_name(called)
            built = site.bound.get(held) if held is not None else None
            ref = self._class(file, built) if built is not None else None
            return ArgKind.KERAS_CALLABLE if ref is not None and self._float16_instance(ref) else ArgKind.UNKNOWN
        if isinstance(value, ast.Name):
            if site.caller is not None and (file.path, f"{site.caller}.{value.id}") in keras_params:
                return ArgKind.KERAS_INSTANCE
            built = site.bound.get(value.id)
            if built is not None:
                ref = self._class(file, built)
                if ref is not None and self._float16_instance(ref):
                    return ArgKind.KERAS_INSTANCE
        if self._float32(file, value) or isinstance(value, ast.Name) and value.id in site.float32:
            return ArgKind.FLOAT32  # a cast, a float32 creator, the caller's input_signature float32 parameter
        if site.flow is not None:
            reaching = _reaching(site.flow, value.id, site.line) if isinstance(value, ast.Name) else None
            if reaching is not None and reaching is not True:
                found = self._value(file, reaching)
                if found is not None and self._float32(file, found):
                    return ArgKind.FLOAT32
            if self._computes(file, site.flow, value, site.line):
                return ArgKind.TENSOR
        return ArgKind.UNKNOWN

    def _args(self, file: FileSummary, site: Site, keras_params: set) -> tuple[tuple[str, ArgKind], ...] | None:
        """What the site passes each parameter of its callee (None: no such project function). Only a caller's
        parameter that receives a Keras instance changes between the rounds: the rest is judged once."""
        static = self._static.get(id(site), _UNSEEN)
        if static is _UNSEEN:
            static = self._static[id(site)] = self._judge(file, site)
        if static is None:
            return None
        if site.caller is None or not keras_params:
            return tuple((name, kind) for name, kind, _ in static)
        return tuple((name, ArgKind.KERAS_INSTANCE if held is not None and (file.path, f"{site.caller}.{held}")
                      in keras_params else kind) for name, kind, held in static)

    def _judge(self, file: FileSummary, site: Site):
        """(parameter, kind with no Keras parameters known, the Name passed or None) per argument; None: no callee."""
        target = self._target(file, site)
        callee_file = self._file(target[0]) if target is not None else None
        func = callee_file.functions.get(target[1]) if callee_file is not None else None
        if func is None:
            return None
        names = func.params
        found = []
        for i, value in enumerate(site.positional):
            if isinstance(value, ast.Starred) or i >= len(names):
                break
            found.append((names[i], value))
        known = set(names) | set(func.kwonly)
        found += [(k, v) for k, v in site.keywords.items() if k in known]
        return tuple((name, self._kind(file, site, value, set()), value.id if isinstance(value, ast.Name) else None)
                     for name, value in found)

    def run(self, pool: Executor | None = None,
            then: Callable[[], None] | None = None) -> dict[str, frozenset[CrossCall]]:
        """The records; ``pool``: helper processes make the eager files' summaries (``_queue``), ``then`` is
        called once they are queued."""
        # The bytes first: every file's called names and class names (cheap). Only a file with a top-level
        # class statement can hold a Keras class (float16 sites, the Keras names); the others are parsed
        # when a later pass asks for them (a callee's parameters, a module functions' walk, a re-export).
        eager = []
        for path in self.files:
            found = self._records.byte_facts(path, self._read)  # stored where the file is as a kept record says
            if found is None:
                self.summaries[path] = None
                continue
            names, top, called, data = found
            if data is None:
                self._called[path] = called
            else:
                self._texts[path] = data
            self._class_names.update(names)
            if top:
                eager.append(path)
        pending = self._queue(pool, [path for path in eager if path in self._texts])
        if then is not None:
            then()
        # Every readable file's called names: the helper processes find those of the files they summarise
        # (``summarise``, from the same bytes; ``_collect`` keeps them), this process the others meanwhile.
        called = self._called
        queued = {path for chunk, future in pending if future is not None for path in chunk}
        for path, data in self._texts.items():
            if path not in queued:
                called[path] = _called_names(data)
        self._collect(pending)
        self._records.keep_facts(called)  # the byte facts of the files read above
        for path in eager:
            self._file(path)
        keras_names = {name for path in eager if (f := self.summaries[path]) is not None
                       for name in f.classes if self.is_keras_class((path, name))}
        for path in eager:
            if self.summaries[path] is not None:
                self._float16_sites(self.summaries[path])
        # Module functions count only in files that call a project Keras class by name (bytes: cheap),
        # then in the files those hand an instance to, and so on (train -> epoch -> step).
        pending = [p for p in self.files if p in called and called[p] & keras_names]
        keras_params: set[tuple[str, str]] = set()  # (path, "function.param") that receives a Keras instance
        for _ in range(6):
            for path in pending:
                file = self._file(path)
                if file is not None and path not in self._plain_done:
                    self._plain_sites(file)
            before = len(keras_params)
            for path in self.files:
                for site in self._sites.get(path, ()):
                    file = self.summaries[path]
                    args = self._args(file, site, keras_params) or ()
                    target = self._target(file, site)
                    keras_params.update((target[0], f"{target[1]}.{n}") for n, k in args
                                        if k is ArgKind.KERAS_INSTANCE)
            targets = {path for path, _ in keras_params}
            pending = [p for p in self.files if p in targets and p not in self._plain_done and self._file(p) is not None]
            if len(keras_params) == before and not pending:
                break
        for file in self.summaries.values():  # sites never put in play: free them
            if file is not None:
                file.class_sites, file.plain_sites = {}, []
        order = list(self.files)
        self._helper_sites(order)
        found: dict[str, set[CrossCall]] = {}
        for path in order:
            file = self.summaries.get(path)
            for site in self._sites.get(path, ()):
                args = self._args(file, site, keras_params)
                if args is None:
                    continue
                target = self._target(file, site)
                cross = target[0] != file.path
                keras = any(k is ArgKind.KERAS_INSTANCE or k is ArgKind.KERAS_CALLABLE for _, k in args)
                if (site.context.float16 and cross) or keras:
                    context = site.context if cross else CallContext.PLAIN
                    found.setdefault(target[0], set()).add(CrossCall(target[1], context, args))
        self._sites, self._texts, self._static = {}, {}, {}
        self._finished = True
        self._records.save(self.summaries)
        return {path: frozenset(calls) for path, calls in found.items()}


def _called_names(data: bytes) -> frozenset[str]:
    """Every name the bytes call (``name(``), as ``summarise`` finds them."""
    return frozenset(n.decode("ascii", "replace") for n in CALL.findall(data))


def _summaries(root: str, items: list[tuple[str, bytes, frozenset[str]]], modules: frozenset[str],
               classes: frozenset[str]) -> list[tuple[FileSummary | None, dict[str, bool]]]:
    """``CrossCallScan._file``'s summaries of ``items`` ((path, bytes, called names)), in a helper process, each with
    the project-module questions it asked (``file_records.recording``)."""
    enabled = gc.isenabled()
    gc.disable()  # as in ``scan_project``: the trees hold no cycles
    try:
        found = []
        for path, data, called in items:
            ask, asked = recording(modules.__contains__)
            found.append((summarise(path, data, _module_name(path, root), ask, sites=True, plain=classes.__and__,
                                    called=called), asked))
        return found
    finally:
        if enabled:
            gc.enable()


def cross_calls(root: Path, files: tuple[Path, ...]) -> dict[str, frozenset[CrossCall]]:
    """For each file of the project: the calls other files make of its functions from float16 code,
    and the calls anywhere that hand its functions a Keras layer/model instance (absolute path -> calls)."""
    return scan_project(root, files)[0]


def scan_project(root: Path, files: tuple[Path, ...], pool: Executor | None = None,
                 then: Callable[[], None] | None = None) -> tuple[dict[str, frozenset[CrossCall]], CrossCallScan]:
    """``cross_calls`` and the scan that found them (its per-file summaries, ``structural_of``, ``keras_class``).
    ``pool``: helper processes for the summaries of the files parsed up front; ``then``: called once
    they are queued (the caller queues more work behind them)."""
    # Each file's syntax tree is alive while it is summarised: the cyclic collector would traverse the
    # millions of nodes the scan allocates again and again (most of the scan's time on tf-models). They
    # hold no cycles; refcounts free each tree when its summary is done.
    enabled = gc.isenabled()
    gc.disable()
    try:
        scan = CrossCallScan(root, files)
        return scan.run(pool, then), scan
    finally:
        if enabled:
            gc.enable()
