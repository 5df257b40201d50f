"""Project Keras classes another file constructs: their instances compute in the policy's compute dtype.

The per-file dtype inference knows a model's output is float16 (certain provenance, ``dtype_outputs``) only when
the model's class is in the same file. An exporter's ``tf.Module`` usually holds a model of another file
(research DELF's export_local_model.py: ``self._model = delf_model.Delf(...)``), and its ``tf.function`` compares
or combines the model's output with float32 tensors (an ``input_signature`` scalar): that raises under
``mixed_float16`` as it does in one file.

The fact, per file: the dotted names (as the file's imports spell them, ``pkg.delf_model.Delf``) of the project
classes it holds (``self.x = Cls(...)``) that are float16 Keras classes: their bases resolve to a Keras layer or
model, and neither the class nor any project base class on the way may make another dtype by its text: spells
``float32`` (a float32 head, a cast of the output), passes a ``dtype=``, or reads ``self.dtype`` (the variable
dtype, float32 under a mixed policy): stricter than the scan's ``float32_classes`` test for Keras instances. Only
files the scan parsed already that define a class which is no Keras layer/model (where a holder is) are asked.
"""

from __future__ import annotations

import ast
import re

from mpfix.keras_spellings import fold_keras
from mpfix.project.crosscall_summary import keras_base
from mpfix.project.crosscalls import CrossCallScan

_HELD = re.compile(rb"self\.\w+\s*=\s*([A-Za-z_][\w.]*)\(")  # `self._model = delf_model.Delf(`


def _may_not_follow(data: bytes) -> frozenset[str]:
    """The top-level classes whose text may make an output other than the compute dtype: one that spells ``float32``
    (a float32 head, a cast), passes a ``dtype=`` (a layer with its own dtype), or reads ``self.dtype`` /
    ``self.variable_dtype`` (float32 under a mixed policy: ``tf.cast(y, self.dtype)``)."""
    if b"float32" not in data and b"dtype" not in data:
        return frozenset()  # no parse
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset(["\0"])  # cannot tell: callers see no class of the file as float16 (``_float16_chain``)
    found = set()
    for cls in (stmt for stmt in tree.body if isinstance(stmt, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, ast.Constant) and node.value == "float32" or isinstance(node, ast.keyword) and \
                    node.arg == "dtype" or isinstance(node, ast.Attribute) and (node.attr == "float32" or node.attr in (
                        "dtype", "variable_dtype") and isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.add(cls.name)
                break
    return frozenset(found)


def _float16_chain(scan: CrossCallScan, ref: tuple[str, str], memo: dict[str, frozenset[str]], depth: int = 0) -> bool:
    """``ref`` and its project base classes never make anything but the compute dtype by their text (the Keras bases
    themselves are Keras's)."""
    file = scan._file(ref[0])
    cls = file.classes.get(ref[1]) if file is not None else None
    if cls is None or depth > 8:
        return False
    if ref[0] not in memo:
        memo[ref[0]] = _may_not_follow(scan._read(ref[0]) or b"float32")
    if ref[1] in memo[ref[0]] or "\0" in memo[ref[0]]:
        return False
    for base in cls.bases:
        if base.dotted is not None and keras_base(base.dotted):
            continue
        parent = scan._class(file, base)
        if parent is None or parent == ref or not _float16_chain(scan, parent, memo, depth + 1):
            return False
    return True


def held_classes(scan: CrossCallScan, files: tuple) -> dict[str, frozenset[str]]:
    """Per parsed file of ``files``: the dotted names of the float16 project Keras classes of OTHER files it calls."""
    found: dict[str, frozenset[str]] = {}
    memo: dict[str, frozenset[str]] = {}  # path -> its classes that may make another dtype (``_may_not_follow``)
    for path in (str(f) for f in files):
        file = scan.summaries.get(path)
        # only a class that is no Keras layer/model holds one (``dtype_outputs`` asks nothing else)
        if file is None or all(scan.is_keras_class((path, name)) for name in file.classes):
            continue
        candidates = []  # (target, as the file spells it) of project classes the file calls
        for local, dotted in file.imports.items():
            if local in file.called:  # `from pkg.model import Delf` ... `Delf(...)`
                candidates.append((dotted, local))
            else:  # `from pkg import model` ... `model.Delf(...)`
                module = scan._module_path(dotted, path)
                summary = scan._file(module) if module is not None and scan.parsed(module) else None
                candidates += [(f"{dotted}.{name}", f"{local}.{name}") for name in summary.classes
                               if name in file.called] if summary is not None else []
        if not candidates:
            continue
        # only ever held as `self.x = Cls(...)` (what ``dtype_outputs`` reads): the bytes decide first
        held = {m.decode("ascii", "replace") for m in _HELD.findall(scan._read(path) or b"")}
        names = set()
        for target, spelled in candidates:
            if spelled not in held:
                continue
            ref = scan._symbol(target, path)
            if ref is not None and ref[0] != path and scan.is_keras_class(ref) and _float16_chain(scan, ref, memo):
                names.add(fold_keras(target))
        if names:
            found[path] = frozenset(names)
    return found
