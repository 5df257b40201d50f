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
dtype, float32 under a mixed policy): the scan's test for Keras instances (``CrossCallScan.may_make_float32``)
with ``dtype=`` keywords counted. Only files the scan parsed already that define a class which is no Keras
layer/model (where a holder is) are asked.
"""

from __future__ import annotations

import re

from mpfix.keras_spellings import fold_keras
from mpfix.project.class_dtypes import float16_class
from mpfix.project.crosscalls import CrossCallScan

_HELD = re.compile(rb"self\.\w+\s*=\s*([A-Za-z_][\w.]*)\(")  # `self._model = delf_model.Delf(`


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
            if ref is not None and ref[0] != path and float16_class(scan, ref, dtype_keywords=True):
                names.add(fold_keras(target))
        if names:
            found[path] = frozenset(names)
    return found
