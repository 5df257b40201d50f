"""Project Keras classes another file constructs: their instances compute in the policy's compute dtype.

The per-file dtype inference knows a model's output is float16 (certain provenance, ``dtype_outputs``) only when
the model's class is in the same file. An exporter's ``tf.Module`` usually holds a model of another file
(research DELF's export_local_model.py: ``self._model = delf_model.Delf(...)``), and its ``tf.function`` compares
or combines the model's output with float32 tensors (an ``input_signature`` scalar): that raises under
``mixed_float16`` as it does in one file.

The fact, per file: the dotted names (as the file's imports spell them, ``pkg.delf_model.Delf``) of the project
classes it calls that are float16 Keras classes: their bases resolve to a Keras layer or model, and neither the
class nor any project base class on the way spells ``float32`` (a float32 head, a cast of the output: the scan's
``float32_classes``). Only files the scan parsed already that define a class which is no Keras layer/model (where
a holder is) are asked.
"""

from __future__ import annotations

import re

from mpfix.keras_spellings import fold_keras
from mpfix.project.crosscall_summary import float32_classes, keras_base
from mpfix.project.crosscalls import CrossCallScan

_HELD = re.compile(rb"self\.\w+\s*=\s*([A-Za-z_][\w.]*)\(")  # `self._model = delf_model.Delf(`


def _float16_chain(scan: CrossCallScan, ref: tuple[str, str], depth: int = 0) -> bool:
    """``ref`` and its project base classes never spell float32 (the Keras bases themselves are Keras's)."""
    file = scan._file(ref[0])
    cls = file.classes.get(ref[1]) if file is not None else None
    if cls is None or depth > 8:
        return False
    if file.float32_classes is None:
        data = scan._read(file.path)
        # bytes that never spell float32 hold no class that does: no parse
        file.float32_classes = float32_classes(data) if data is not None and b"float32" in data else frozenset()
    if ref[1] in file.float32_classes:
        return False
    for base in cls.bases:
        if base.dotted is not None and keras_base(base.dotted):
            continue
        parent = scan._class(file, base)
        if parent is None or parent == ref or not _float16_chain(scan, parent, depth + 1):
            return False
    return True


def held_classes(scan: CrossCallScan, files: tuple) -> dict[str, frozenset[str]]:
    """Per parsed file of ``files``: the dotted names of the float16 project Keras classes of OTHER files it calls."""
    found: dict[str, frozenset[str]] = {}
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
            if ref is not None and ref[0] != path and scan.is_keras_class(ref) and _float16_chain(scan, ref):
                names.add(fold_keras(target))
        if names:
            found[path] = frozenset(names)
    return found
