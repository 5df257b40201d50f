"""``functools.partial`` as a caller: the arguments a partial binds, and the calls of a name or ``self`` attribute bound
to one, are what its function is passed.

A Keras layer or model that hands a module function on with some of its parameters bound (research DELG,
``functools.partial(cosine_classifier_logits, cosine_weights=self.cosine_weights, scale_factor=self.scale_factor)``)
passes those values: a plain ``tf.Variable`` of the layer is float32 and not autocast (only ``add_weight`` makes an
autocast variable), so a parameter bound to one is float32, not the float16 a helper's parameter is taken as. A later
call of the partial (``self.classifier(self.backbone(images))``) passes its positional arguments to the parameters the
partial left free, in order. Each record is ``(function, [(parameter, value)], call node, region the values are read
in)``; values of a partial made outside every region are read in its function's shadow region (no float16 there).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtype_lattice import F32, PY, UNK, Dtype, argument, is_float_literal, number, \
    spelled_dtype
from mpfix.codemods.analysis.dtype_syntax import walk_calls

_PARTIAL = "functools.partial"

Record = tuple[cst.FunctionDef, list[tuple[str, cst.BaseExpression]], cst.Call, object]
Site = tuple[list[tuple[str, cst.BaseExpression]], cst.Call, object, bool]  # pairs, call, caller, a partial's binding


def _names(func: cst.FunctionDef) -> list[str]:
    names = [p.name.value for p in [*func.params.posonly_params, *func.params.params]]
    return names[1:] if names and names[0] in ("self", "cls") else names


def _bound(call: cst.Call, names: list[str]) -> list[tuple[str, cst.BaseExpression]] | None:
    """(parameter, value) for the arguments ``call`` passes after ``skip`` positional ones; None past a star."""
    pairs = []
    for i, arg in enumerate(call.args):
        if arg.star:
            return None
        pname = arg.keyword.value if arg.keyword is not None else (names[i] if i < len(names) else None)
        if pname is not None:
            pairs.append((pname, arg.value))
    return pairs


def _named_partial(func: cst.BaseExpression) -> bool:
    """``partial`` / ``functools.partial`` by its last name (a cheap test before resolving)."""
    return (isinstance(func, cst.Attribute) and func.attr.value == "partial") or \
        (isinstance(func, cst.Name) and func.value == "partial")


class PartialCalls:
    """Mixed into ``DtypeAnalysis`` (through ``ParameterDtypes``): what partials pass the module's functions."""

    def bound_dtype(self, value: cst.BaseExpression, region) -> Dtype:
        """A value a partial binds outside every region (a layer's ``__init__``/``build``), as the function sees it when
        the partial runs, in the layer's ``call``: ``self.w`` there (an ``add_weight`` variable autocast to float16, a
        plain ``tf.Variable`` float32), a Python number; anything else is unknown."""
        if number(value) is not None:
            return PY
        if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) and value.value.value == "self" and \
                region.owner is not None and self.is_layer_class(region.owner):
            return self.attribute_dtype(region.owner, value.attr.value, in_call=True)
        return UNK

    def partial_records(self) -> list[Record]:
        found = getattr(self, "_partial_records", None)
        if found is None:
            self._partial_ids: set[int] = set()
            self._accounted: set[int] = set()
            found = self._partial_records = list(self._partials()) if any(
                _named_partial(call.func) and self.resolve(call.func) == _PARTIAL for call in self.all_calls) else []
        return found

    def _partials(self) -> Iterator[Record]:
        scopes: list[tuple[cst.FunctionDef, cst.ClassDef | None]] = [
            *((f, None) for f in self.functions.values()),
            *((m, cls) for cls, table in self.methods.items() for m in table.values())]
        for scope, owner in scopes:
            for call in walk_calls(scope):
                if self.resolve(call.func) != _PARTIAL or not call.args or call.args[0].keyword is not None:
                    continue
                first = call.args[0].value
                target = self.functions.get(first.value) if isinstance(first, cst.Name) else None
                if target is None:
                    continue
                names = _names(target)
                inner = cst.Call(func=first, args=call.args[1:])
                bound = _bound(inner, names)
                if bound is None:
                    continue
                region = self.region_of.get(call)
                if region is None or region.kind == "module":
                    region = self.region_for(scope, owner)
                yield target, bound, call, region
                self._partial_ids.add(id(call))
                free = [n for n in names[sum(1 for a in call.args[1:] if a.keyword is None):]
                        if n not in {p for p, _ in bound}]
                yield from self._calls_of_partial(call, scope, owner, target, free)

    def _calls_of_partial(self, partial: cst.Call, scope: cst.FunctionDef, owner: cst.ClassDef | None,
                          target: cst.FunctionDef, free: list[str]) -> Iterator[Record]:
        """Calls of ``self.attr`` (``attr`` bound only to ``partial`` in ``owner``) in the regions: their positional
        arguments go to the parameters the partial left free."""
        if owner is None:
            return
        attrs = {name for name, values in self.attribute_values_table(owner).items()
                 if values and all(value is partial for _, value in values)}
        if not attrs:
            return
        reads = [node for node in walk(owner) if isinstance(node, cst.Attribute) and node.attr.value in attrs
                 and isinstance(node.value, cst.Name) and node.value.value == "self"]
        calls = {id(call.func) for call in self.all_calls}
        if len(reads) == len(attrs) + sum(1 for read in reads if id(read) in calls):
            self._accounted.add(id(partial))  # `self.attr` is assigned once and otherwise only called
        for call in self.all_calls:
            func = call.func
            region = self.region_of.get(call)
            if region is None or region.kind == "module" or region.owner is not owner or \
                    not isinstance(func, cst.Attribute) or func.attr.value not in attrs or \
                    not (isinstance(func.value, cst.Name) and func.value.value == "self"):
                continue
            pairs = _bound(call, free)
            if pairs is not None:
                self._partial_ids.add(id(call))  # a call through the partial: the parameters it binds are not here
                yield target, pairs, call, region

    def plain_float32_variable(self, value: cst.BaseExpression, region) -> bool:
        """``self.w`` of a layer, bound only to plain ``tf.Variable(...)`` constructions that are float32: not autocast
        (only ``add_weight`` makes an autocast variable), so float32 wherever the layer reads it."""
        if not (isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) and value.value.value == "self"
                and region.owner is not None and self.is_layer_class(region.owner)):
            return False
        values = self.attribute_values(region.owner, value.attr.value)
        return bool(values) and all(self._float32_variable_call(v) for _, v in values)

    def _float32_variable_call(self, value: cst.BaseExpression) -> bool:
        """``tf.Variable(init)`` that is float32: told ``dtype=tf.float32``, or made from a float literal or a
        TensorFlow/Keras creator or initializer the table types float32 (a NumPy array is float64: measure's probe)."""
        if not isinstance(value, cst.Call) or self.resolve(value.func) != "tensorflow.Variable":
            return False
        dtype = argument(value, "dtype", 6)
        if dtype is not None:
            return spelled_dtype(dtype.value, self.resolve) is F32
        init = argument(value, "initial_value", 0)
        if init is None:
            return False
        if is_float_literal(init.value):
            return True
        if not isinstance(init.value, cst.Call):
            return False
        creator = init.value.func.func if isinstance(init.value.func, cst.Call) else init.value.func  # Glorot()(shape)
        resolved = self.resolve(creator) or ""
        return resolved.startswith(("tensorflow.", "keras.")) and self.dtype(init.value, self._module_region()) is F32

    def _module_region(self):
        return next(r for r in self.regions if r.kind == "module")

    def note_site(self, target: cst.FunctionDef, pairs: list[tuple[str, cst.BaseExpression]], call: cst.Call,
                  caller) -> None:
        """A call site of ``target`` in this file and what it passes (``ParameterDtypes`` records every one)."""
        sites = self.__dict__.setdefault("_sites", {})
        partial = id(call) in getattr(self, "_partial_ids", ())  # the partial or a call of it
        sites.setdefault(target, {})[id(call)] = (pairs, call, caller, partial)

    def passed_everywhere(self, pname: str, region, test):
        """``test(value, caller_region)`` for what every call site of this file passes parameter ``pname`` of
        ``region``'s module function (directly, or through a ``functools.partial`` bound to a ``self`` attribute that
        is only called), when the function is referenced nowhere else and no other file calls it: the first result
        when every one is truthy, else None."""
        func = region.node
        if not isinstance(func, cst.FunctionDef) or region.closure or region.in_class or \
                any(c.function == func.name.value for c in getattr(self, "cross_calls", ())):
            return None
        sites = self.__dict__.get("_sites", {}).get(func)
        if not sites or not self._only_called(func, list(sites.values())):
            return None
        first = None
        for pairs, _, caller, binding in sites.values():
            value = dict(pairs).get(pname)
            if value is None and binding:
                continue  # the partial leaves it to its calls, or binds it (each is a site of its own)
            found = test(value, caller) if value is not None and caller is not None and caller is not region else None
            if not found:
                return None
            first = first or found
        return first

    def _only_called(self, func: cst.FunctionDef, sites) -> bool:
        memo = self.__dict__.setdefault("_only_called_memo", {})
        key = (func, len(sites))
        if key not in memo:
            memo[key] = self._referenced_only_by(func, sites)
        return memo[key]

    def _referenced_only_by(self, func: cst.FunctionDef, sites) -> bool:
        allowed = {id(func.name)}
        for _, call, _, binding in sites:
            if binding and self.resolve(call.func) == _PARTIAL:
                if id(call) not in self._accounted:
                    return False
                allowed.add(id(call.args[0].value))
            else:
                allowed.add(id(call.func))
        names = self.index.get(cst.Name, ()) if self.index is not None else walk(self.module)
        return all(id(node) in allowed for node in names
                   if isinstance(node, cst.Name) and node.value == func.name.value)
