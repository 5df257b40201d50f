"""The project pass of structural parameter typing (``mpfix.project.structural``), on the cross-file scan's
summaries (``mpfix.project.crosscalls.scan_project``: one ``ast`` parse per file, ``structural_of``); a class's
bases are followed over every project file here (the scan's module index holds the scanned files only).

Files read beyond the scan's: of the other project files (those float16 does not reach, in a default run), only
the ones whose bytes spell an attribute name a scanned function reads on a parameter it calls (a class defining
``meta`` spells ``meta``), for their classes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mpfix import safe_read
from mpfix.project.crosscall_records import CrossCall
from mpfix.project.structural import StructuralSummary, has_float16_shape, records
from mpfix.keras_spellings import fold_keras
from mpfix.project.structural_types import KERAS_CLASS_BASES, KERAS_MEMBERS
from mpfix.project.call_pattern import CALL

_MAX_BYTES = 2_000_000
_DEF = re.compile(rb"def(?<=\bdef)[ \t]+\w+[ \t]*\(([^)]*)\)")  # ``def`` first: a literal prefix (callers._DEF)
_PARAM = re.compile(rb"([A-Za-z_]\w*)\s*(?=[,:=]|$)")
# Where a class can define a name (``structural._class``): ``def name``, ``self.name`` targets (any ``.name``),
# class-level ``name = ...``/``name: T``; gaps may hold whitespace, continuations, comments, parentheses.
_GAP = rb"(?:[\s\\]|#[^\r\n]*[\r\n])*"  # a comment runs to its newline: one way to match, no backtracking blow-up
_DEFINING = rb"(?:\bdef|\.)" + _GAP + rb"{}\b|\b{}(?:[\s\\)]|#[^\r\n]*[\r\n])*(?:=(?!=)|:)"
_WORD = rb"\b{}\b"


def _module_name(path: str, root: str) -> str:
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _calls_a_parameter(path: str, called: frozenset[str] | None) -> bool:
    """Some ``def`` of the file has a parameter its bytes both call (``net(``) and read an attribute of
    (``net.meta``): cheap, before a parse."""
    try:
        data = safe_read.read_bytes(path, _MAX_BYTES)
    except (OSError, ValueError):
        return False
    if called is None:
        called = frozenset(n.decode("ascii", "replace") for n in CALL.findall(data))
    params = {p for sig in _DEF.findall(data) for p in _PARAM.findall(sig)} - {b"self", b"cls"}
    return any(p.decode("ascii", "replace") in called and re.search(rb"\b" + re.escape(p) + rb"\.[A-Za-z_]", data)
               for p in params)


class _Modules:
    """Dotted module suffixes -> project files (every file of the project, not only the scanned ones: a model
    class nobody imports is still the project's), to follow a class's project bases."""

    def __init__(self, scan, root: Path, files) -> None:
        self.scan = scan
        self._keras: dict[tuple[str, str], bool] = {}
        self.root = str(root)
        self.files = [str(f) for f in files if str(f).endswith(".py")]
        self.by_suffix: dict[str, list[str]] = {}
        for path in self.files:
            parts = _module_name(path, self.root).split(".")
            for i in range(len(parts)):
                self.by_suffix.setdefault(".".join(parts[i:]), []).append(path)

    def base_of(self, path: str, dotted: str, local: frozenset[str] = frozenset()) -> tuple[str, str] | None:
        """The project class a base of a class in ``path`` names (a class of the same file, or an imported one)."""
        if "." not in dotted:
            return (path, dotted) if dotted in local else None
        module, _, name = dotted.rpartition(".")
        found = self.by_suffix.get(module)
        if not found:
            return None
        target = found[0] if len(found) == 1 else max(found, key=lambda p: len(os.path.commonpath([p, path])))
        return (target, name)


    def keras_class(self, path: str, name: str, depth: int = 0) -> bool:
        """A class whose bases resolve to a Keras layer/model, through the project's classes."""
        ref = (path, name)
        if ref not in self._keras:
            self._keras[ref] = False  # cycles
            summary = self.scan.structural_of(path)
            cls = next((c for c in summary.classes if c.name == name), None) if summary is not None else None
            local = frozenset(c.name for c in summary.classes) if summary is not None else frozenset()
            result = False
            for base in cls.bases if cls is not None and depth < 8 else ():
                parent = self.base_of(path, base, local)
                result = fold_keras(base).startswith(KERAS_CLASS_BASES) or (
                    parent is not None and parent != ref and self.keras_class(*parent, depth + 1))
                if result:
                    break
            self._keras[ref] = result
        return self._keras[ref]


def structural_calls(scan, scanned, files) -> dict[str, frozenset[CrossCall]]:
    """The Keras-instance records structural typing gives the module functions of ``scanned`` (the files the
    cross-file scan read), from that scan's summaries (``CrossCallScan.structural_of``: its one parse) and its
    Keras classes (``keras_class``); the classes' side is every project file of ``files`` that spells an
    attribute name those functions read on a parameter they call."""
    summaries: dict[str, StructuralSummary] = {}
    names: set[str] = set()
    for path in (str(f) for f in scanned if str(f).endswith(".py")):
        if not scan.parsed(path) and not _calls_a_parameter(path, scan.called_names(path)):
            continue  # not parsed by the scan, and no parameter its bytes call and read: no read to find
        summary = scan.structural_of(path)
        if summary is None:
            continue
        summaries[path] = summary
        names.update(a for _, params in summary.reads for _, attrs in params for a in attrs
                     if a not in KERAS_MEMBERS and not a.startswith("__"))
    if not names:
        return {}
    modules = _Modules(scan, Path(scan.root), files)
    needles = [n.encode() for n in names]
    candidates: dict[str, bytes] = {}
    for path in modules.files:
        if path in summaries:
            continue
        try:
            data = safe_read.read_bytes(path, _MAX_BYTES)
        except (OSError, ValueError):
            continue
        if b"class " in data and any(n in data for n in needles):
            candidates[path] = data
    # Parse first the candidates that can define a read name (spell it where a class defines a name: ``def
    # name``, ``.name``, ``name =``/``name:``; non-ASCII: NFKC identifiers) or subclass a class that does (spell
    # its name), to a fixed point; the others define none and inherit none, so they only matter when no
    # float16 class is found without them (records' early exit).
    todo = _spelling(candidates, names, _DEFINING, ascii_only=False)
    while todo:
        for path in todo:
            _add_classes(scan, summaries, path)
            del candidates[path]
        todo = _spelling(candidates, _definers(summaries, names, _bases(modules, summaries)), _WORD,
                         ascii_only=True)
    if candidates and not has_float16_shape(summaries, modules.keras_class, _bases(modules, summaries)):
        for path in candidates:
            _add_classes(scan, summaries, path)
    return records(summaries, modules.keras_class, _bases(modules, summaries))


def _add_classes(scan, summaries: dict[str, StructuralSummary], path: str) -> None:
    summary = scan.structural_of(path)
    if summary is not None:
        summaries[path] = StructuralSummary(summary.classes, ())  # its classes only: not a scanned file


def _bases(modules: _Modules, summaries: dict[str, StructuralSummary]):
    """``base_of`` over ``summaries``' classes (a base named without a dot is a class of the same file)."""
    local = {path: frozenset(c.name for c in s.classes) for path, s in summaries.items()}
    return lambda path, dotted: modules.base_of(path, dotted, local.get(path, frozenset()))


def _spelling(candidates: dict[str, bytes], words, form: bytes, ascii_only: bool) -> list[str]:
    """The candidates whose bytes spell one of ``words`` in ``form`` (``_DEFINING``, ``_WORD``; ``{}`` stands
    for the alternatives), or hold a non-ASCII byte (unless ``ascii_only``)."""
    pattern = re.compile(form.replace(b"{}", b"(?:" + b"|".join(re.escape(w.encode()) for w in sorted(words)) + b")")) \
        if words else None
    return [path for path, data in candidates.items()
            if (not ascii_only and not data.isascii()) or (pattern is not None and pattern.search(data))]


def _definers(summaries: dict[str, StructuralSummary], names: set[str], base_of) -> set[str]:
    """Names of the classes of ``summaries`` that define one of ``names`` or inherit one (any depth)."""
    by_ref = {(path, c.name): c for path, s in summaries.items() for c in s.classes}
    hit = {ref for ref, c in by_ref.items() if not c.defines.isdisjoint(names)}
    grew = True
    while grew:
        grew = False
        for ref, c in by_ref.items():
            if ref not in hit and any(base_of(ref[0], b) in hit for b in c.bases):
                hit.add(ref)
                grew = True
    return {name for _, name in hit}
