"""Whether a project Keras class computes in the policy's compute dtype, read from its text (and its bases').

One predicate for the cross-file facts that hand another file a float16 model: an instance or a callable running
one (``CrossCallScan``: ``ArgKind.KERAS_INSTANCE``/``KERAS_CALLABLE``) and a model a ``tf.Module`` holds
(``held_models``, stricter: ``dtype_keywords``). A class may make another dtype when its text spells ``float32``
(a constant or an attribute: a float32 head, a cast of the output) or reads ``self.dtype`` /
``self.variable_dtype`` (the variable dtype, float32 under a mixed policy: ``tf.cast(y, self.dtype)``); with
``dtype_keywords`` also when it passes any ``dtype=`` (a layer with its own dtype; too coarse for the scan's
recall: ``tf.range(n, dtype=tf.int32)``). Its project base classes are its text too (``class Ranker(Scorer)``
runs Scorer's ``call``; held models also want every base to be a project or Keras class). A class name defined twice counts every definition: a subclass between the two inherits
the first.
"""

from __future__ import annotations

import ast

from mpfix.project.crosscall_summary import keras_base

_VARIABLE_DTYPE = ("dtype", "variable_dtype")
_UNKNOWN = {"\0": (True, True)}  # a file that cannot be read or parsed: any class may


def class_dtypes(data: bytes) -> dict[str, tuple[bool, bool]] | None:
    """Per top-level class name: (its text spells ``float32`` or reads ``self.dtype``/``self.variable_dtype``,
    it passes a ``dtype=`` keyword), over every definition of the name. None: the text does not parse."""
    if b"float32" not in data and b"dtype" not in data:
        return {}  # no class can: no parse
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found: dict[str, tuple[bool, bool]] = {}
    for cls in (stmt for stmt in tree.body if isinstance(stmt, ast.ClassDef)):
        spelled, keyword = found.get(cls.name, (False, False))
        for n in ast.walk(cls):
            if type(n) is ast.keyword:
                keyword = keyword or n.arg == "dtype"
            elif type(n) is ast.Constant and n.value == "float32" or type(n) is ast.Attribute and (
                    n.attr == "float32" or n.attr in _VARIABLE_DTYPE and type(n.value) is ast.Name and
                    n.value.id == "self"):
                spelled = True
                break
        found[cls.name] = (spelled, keyword)
    return found


def _own_text(scan, ref: tuple[str, str], dtype_keywords: bool) -> bool:
    """Class ``ref``'s own text may make another dtype (True where the file cannot be read or parsed)."""
    file = scan._file(ref[0])
    if file.class_dtypes is None:  # the one question that needs a class's body: read it again, once
        data = scan._read(file.path)
        found = class_dtypes(data) if data is not None else None
        file.class_dtypes = found if found is not None else _UNKNOWN
    if file.class_dtypes is _UNKNOWN:
        return True
    spelled, keyword = file.class_dtypes.get(ref[1], (False, False))
    return spelled or dtype_keywords and keyword


def float16_class(scan, ref: tuple[str, str], dtype_keywords: bool = False, depth: int = 0) -> bool:
    """``ref`` is a project Keras layer/model class whose outputs follow the compute dtype: neither it nor a project
    base class on the way may make another dtype by its text (the Keras bases themselves are Keras's). ``scan``: the
    ``CrossCallScan`` (not imported: it imports this module)."""
    file = scan._file(ref[0])
    cls = file.classes.get(ref[1]) if file is not None else None
    if cls is None or depth > 8 or depth == 0 and not scan.is_keras_class(ref) or \
            _own_text(scan, ref, dtype_keywords):
        return False
    for base in cls.bases:
        if base.dotted is not None and keras_base(base.dotted):
            continue
        parent = scan._class(file, base)
        if parent is None and not dtype_keywords:
            continue  # no project class (a library mixin): the scan reads the project's text only
        if parent is None or parent == ref or not float16_class(scan, parent, dtype_keywords, depth + 1):
            return False
    return True
