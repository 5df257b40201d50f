"""Calls a file makes of its own Keras ``Loss`` classes through a model's compiled losses.

A Model subclass with its own ``train_step`` often calls its compiled losses itself (``self.loss.get('class_loss')``,
``self.loss[BoxLoss.__name__]``), after casting the model's outputs to float32 (EfficientDet's ``_detection_loss``).
On Keras 2 a ``Loss`` does not convert its inputs, so what its ``call`` sees is what those calls pass. A key that
names a class (``Cls.__name__``, or a string a dict of this file maps to ``Cls(...)``) reaches that class alone; any
other key may reach any loss class of the file.

Works on a ``DtypeAnalysis`` (duck-typed: ``module``, ``classes``, ``methods``, ``resolve``, ``index``); imports no
analysis module, so ``dtype_regions`` and ``dtype_env`` can both use it.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import walk
from mpfix.codemods.facts import keras_layers

_COMPILED = "loss"  # ``Model.loss``: what ``compile(loss=...)`` was given (a dict of Loss objects here)


def is_keras_loss_class(analysis, cls: cst.ClassDef, depth: int = 0) -> bool:
    """A subclass of ``keras.losses.Loss`` (directly or through a class of this file)."""
    for base in cls.bases:
        if (analysis.resolve(base.value) or "").startswith(keras_layers.LOSS_BASES):
            return True
        parent = analysis.classes.get(analysis.module.code_for_node(base.value))
        if parent is not None and parent is not cls and depth < 5 and is_keras_loss_class(analysis, parent, depth + 1):
            return True
    return False


def _compiled_key(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``K`` of ``self.loss.get(K, ...)`` / ``self.loss[K]``; None for anything else."""
    def is_compiled(value: cst.BaseExpression) -> bool:
        return isinstance(value, cst.Attribute) and value.attr.value == _COMPILED and \
            isinstance(value.value, cst.Name) and value.value.value == "self"

    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "get" and \
            is_compiled(node.func.value) and node.args:
        return node.args[0].value
    if isinstance(node, cst.Subscript) and is_compiled(node.value) and len(node.slice) == 1 and \
            isinstance(node.slice[0].slice, cst.Index):
        return node.slice[0].slice.value
    return None


def _dict_keys(analysis) -> dict[str, str]:
    """String keys of dict literals in this file whose value builds a class of the file (``{'box': BoxLoss()}``)."""
    found = getattr(analysis, "_loss_dict_keys", None)
    if found is None:
        found = {}
        dicts = analysis.index.get(cst.Dict, ()) if analysis.index is not None else \
            [n for n in walk(analysis.module) if isinstance(n, cst.Dict)]
        for node in dicts:
            for element in node.elements:
                if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString) and \
                        isinstance(element.value, cst.Call) and isinstance(element.value.func, cst.Name) and \
                        element.value.func.value in analysis.classes:
                    found[element.key.evaluated_value] = element.value.func.value
        analysis._loss_dict_keys = found
    return found


def loss_classes(analysis) -> list[cst.ClassDef]:
    """The file's Keras loss classes that have a ``call``."""
    return [cls for cls in analysis.classes.values()
            if "call" in analysis.methods.get(cls, {}) and is_keras_loss_class(analysis, cls)]


def compiled_loss_targets(analysis, call: cst.Call, assigned: dict[str, list[cst.BaseExpression]]) -> list:
    """The ``call`` methods of the file's loss classes ``call`` may run: ``self.loss[K](...)``, or a name bound once
    (in the caller's ``assigned`` table) to ``self.loss.get(K)``/``self.loss[K]``."""
    func = call.func
    if isinstance(func, cst.Name):
        values = assigned.get(func.value, [])
        if len(values) != 1:
            return []
        func = values[0]
    key = _compiled_key(func)
    if key is None:
        return []
    named = _named_class(analysis, key)
    return [analysis.methods[cls]["call"] for cls in loss_classes(analysis) if named in (None, cls.name.value)]


def _named_class(analysis, key: cst.BaseExpression) -> str | None:
    """The class a compiled-loss key names (``Cls.__name__``, or a string a dict of this file maps to ``Cls(...)``);
    None when the key may name any."""
    if isinstance(key, cst.Attribute) and key.attr.value == "__name__":
        return analysis.module.code_for_node(key.value)  # `tf.keras.losses.X.__name__` names no class of the file
    if isinstance(key, cst.SimpleString):
        return _dict_keys(analysis).get(key.evaluated_value)
    return None


def reached_by_compiled_losses(analysis, cls: cst.ClassDef) -> bool:
    """``cls`` is a Keras loss class that a compiled-loss read of this file (``self.loss.get(K)``, ``self.loss[K]``)
    may name: its ``call`` gets what the file's own train step passes."""
    keys = getattr(analysis, "_compiled_loss_keys", None)
    if keys is None:
        nodes = [*analysis.index.get(cst.Call, ()), *analysis.index.get(cst.Subscript, ())] \
            if analysis.index is not None else list(walk(analysis.module))
        keys = [k for k in (_compiled_key(n) for n in nodes if isinstance(n, (cst.Call, cst.Subscript))) if k is not None]
        analysis._compiled_loss_keys = keys
    return bool(keys) and is_keras_loss_class(analysis, cls) and \
        any(_named_class(analysis, key) in (None, cls.name.value) for key in keys)
