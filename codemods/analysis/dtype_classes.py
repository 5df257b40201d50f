"""What the classes of a module are to the dtype inference: Keras layers, ``tf.Module``s, float32 layers, layers that
do not autocast, and the layers a class lists (mixed into ``DtypeAnalysis``; moved out of ``dtype_regions`` and
``dtype_infer`` to keep each module under ~400 lines, unchanged)."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtype_lattice import UNK, argument, number, spelled_dtype
from mpfix.codemods.analysis.dtype_regions import Region
from mpfix.codemods.analysis.dtype_syntax import mentions, walk_calls
from mpfix.codemods.facts import heuristics, keras_layers


class LayerClasses:
    """Mixed into ``DtypeAnalysis``: what a class of the module is."""

    def is_layer_class(self, cls: cst.ClassDef) -> bool:
        """A Keras layer or model class: its ``call`` sees tensors in the compute dtype.

        Loss classes' ``call`` see float32 labels and (on Keras 3) float32 predictions."""
        for base in cls.bases:
            resolved = self.resolve(base.value) or ""
            spelled = self.code(base.value)
            if resolved.startswith("keras.losses") or "Loss" in spelled:
                return False
            if resolved.startswith(("keras.layers", "keras.Model", "keras.models", "keras.Layer", "keras.src.layers",
                                    "keras.src.engine.base_layer", "keras.src.models")) or \
                    heuristics.LAYER_BASE_NAME.search(spelled):
                return True
            if spelled in self.classes and self.classes[spelled] is not cls and self.is_layer_class(self.classes[spelled]):
                return True
        return False

    def is_module_class(self, cls: cst.ClassDef, depth: int = 0) -> bool:
        """A ``tf.Module`` subclass (directly or through a base class of this file)."""
        for base in cls.bases:
            if (self.resolve(base.value) or "") == "tensorflow.Module":
                return True
            parent = self.classes.get(self.code(base.value))
            if parent is not None and parent is not cls and depth < 5 and self.is_module_class(parent, depth + 1):
                return True
        return False

    def float32_layer(self, cls: cst.ClassDef) -> bool:
        """A layer that computes in float32: its ``__init__`` passes ``dtype="float32"`` up, or every
        construction of it in this file does (``Head(dtype="float32")``)."""
        found = self._float32_layers.get(cls)
        if found is not None:
            return found
        result = False
        init = self.methods.get(cls, {}).get("__init__")
        if init is not None:
            for call in walk_calls(init):
                if isinstance(call.func, cst.Attribute) and call.func.attr.value == "__init__":
                    arg = argument(call, "dtype", None)
                    if arg is not None and (spelled_dtype(arg.value, self.resolve) or UNK).wide:
                        result = True
        if not result:
            built = self._constructions().get(cls.name.value, [])
            result = bool(built) and all(
                (arg := argument(c, "dtype", None)) is not None and (spelled_dtype(arg.value, self.resolve) or UNK).wide
                for c in built)
        self._float32_layers[cls] = result
        return result

    def _constructions(self) -> dict[str, list[cst.Call]]:
        """Calls of a bare name, by that name: built once per file (a scan per class was quadratic:
        8.5 s of 60 on keras' layer_test.py, 1,900 lines and ~100 classes)."""
        if self._calls_by_name is None:
            by_name: dict[str, list[cst.Call]] = {}
            for call in self.index.get(cst.Call, ()) if self.index is not None else walk_calls(self.module):
                if isinstance(call.func, cst.Name):
                    by_name.setdefault(call.func.value, []).append(call)
            self._calls_by_name = by_name
        return self._calls_by_name

    def inherits_float32_compute(self, cls: cst.ClassDef, depth: int = 0) -> bool:
        """A subclass of a Keras layer that computes in float32 (``class ScaledNorm(LayerNormalization)``)."""
        for base in cls.bases:
            if keras_layers.computes_float32(self.resolve(base.value), self.keras):
                return True
            parent = self.classes.get(self.code(base.value))
            if parent is not None and parent is not cls and depth < 5 and self.inherits_float32_compute(parent, depth + 1):
                return True
        return False

    def autocasts(self, cls: cst.ClassDef) -> bool:
        """False for layers that do not autocast (``autocast=False``, preprocessing/feature layers)."""
        found = self._autocast.get(cls)
        if found is not None:
            return found
        self._autocast[cls] = True  # recursion guard
        result = True
        for base in cls.bases:
            spelled = self.code(base.value)
            resolved = self.resolve(base.value) or ""
            spec = keras_layers.layer(resolved, self.keras)
            if (spec is not None and not spec.autocasts) or ".preprocessing." in resolved or \
                    heuristics.NO_AUTOCAST_BASE.search(spelled):
                result = False
            elif spelled in self.classes and not self.autocasts(self.classes[spelled]):
                result = False
        init = self.methods.get(cls, {}).get("__init__")
        if result and init is not None:
            # The words first (a walk of its tokens), the code only where one is there: generating every layer's
            # `__init__` was ~10% of the analysis.
            if mentions(init, heuristics.AUTOCAST_WORDS) and heuristics.AUTOCAST_FALSE.search(self.code(init)):
                result = False
        self._autocast[cls] = result
        return result

    def _listed_layers(self, item: cst.Subscript, region: Region) -> list[cst.BaseExpression]:
        """``layer[k]`` where ``layer`` iterates ``self.layers`` (``for _, layer in enumerate(self.layers)``): the k-th
        element of every list the class appends to ``self.layers`` (``self.layers.append([Wrapper(...), ...])``,
        research detr_lib.py). Empty when any of them is not a list literal with a k-th element."""
        index = item.slice[0].slice if len(item.slice) == 1 else None
        k = number(index.value) if isinstance(index, cst.Index) else None
        if not isinstance(item.value, cst.Name) or k is None or k != int(k) or region.owner is None or \
                not isinstance(region.node, cst.FunctionDef):
            return []
        name, attr = item.value.value, None
        for loop in (n for n in walk(region.node) if isinstance(n, cst.For)):
            target, source = loop.target, loop.iter
            if isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(source, cst.Call) and \
                    isinstance(source.func, cst.Name) and source.func.value == "enumerate" and source.args:
                target, source = target.elements[1].value, source.args[0].value
            if isinstance(target, cst.Name) and target.value == name:
                if attr is not None or not (isinstance(source, cst.Attribute) and isinstance(source.value, cst.Name)
                                            and source.value.value == "self"):
                    return []
                attr = source.attr.value
        if attr is None or len(region.assigned.get(name, [])) != 1:
            return []
        listed = []
        for func in self.methods.get(region.owner, {}).values():
            for call in (n for n in walk(func) if isinstance(n, cst.Call)):
                f = call.func
                if isinstance(f, cst.Attribute) and f.attr.value == "append" and isinstance(f.value, cst.Attribute) \
                        and isinstance(f.value.value, cst.Name) and f.value.value.value == "self" \
                        and f.value.attr.value == attr:
                    element = call.args[0].value if len(call.args) == 1 else None
                    if not isinstance(element, cst.List) or int(k) >= len(element.elements):
                        return []
                    listed.append(element.elements[int(k)].value)
        return listed
