"""MP209: integer ids cut from a layer's float16 (autocast) input and handed to an Embedding."""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._float16_scope import argument, first_arg
from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.base import Fact, Invalid, Need, Rule, Valid
from mpfix.codemods.facts import keras_layers, ops as op_table
from mpfix.codemods.facts.dtype_facts import DtypeFacts, dtype_facts
from mpfix.codemods.names import self_attribute
from mpfix.findings import FixSafety


class Float16IntegerIds(Rule):
    code = "MP209"
    name = "float16-integer-ids"
    uses = frozenset({Fact.DTYPES})
    message = ("Integer ids taken from a layer's float16 input are rounded past 2048; pass them as an int input or "
               "compute the layer in float32")
    messages = {
        "ids": ("`{ids}` hands ids from `{source}` to an Embedding, but the layer's float input is autocast to float16, "
                "where integers past 2048 are not exact (steps of 2, of 4 past 4096): ids collide or pass the table's "
                "end; pass the ids as an int input, or build the layer with dtype=\"float32\""),
    }
    fix_safety = FixSafety.NONE  # report only: where the ids should come from is the author's choice
    requires_float16 = True
    needs = frozenset({Need.FLOAT16_REGION})  # reports only in a float16 dtype region (the parse gate)
    triggers = tuple(sorted(keras_layers.READS_IDS))
    explanation = """
        ## What it does
        Finds a custom layer that cuts a column out of its float input, casts it to an integer
        dtype and hands it to an `Embedding` it owns (`self.embed(tf.cast(features[:, 0],
        tf.int32))`) while the layer computes in float16 under `mixed_float16`: ids packed into a
        float feature matrix (a store id beside price and promotion columns).

        ## Why is this bad?
        Keras casts a layer's floating inputs to its compute dtype before `call` (both
        generations), and float16 holds whole numbers exactly only up to 2048 (then in steps of
        2, and of 4 past 4096). Store 4097 becomes 4096 and shares its embedding; 5999 becomes
        6000, which an `Embedding(6000, ...)` does not have (`InvalidArgumentError: indices[140]
        = 6000 is not in [0, 6000)` on CPU; silently zeros on GPU). Keras' own `Embedding` turns
        input autocasting off for this reason; a custom layer around it does not.

        ## Example
        ```python
        class StoreFeatures(keras.layers.Layer):
            def call(self, features):
                store = tf.cast(features[:, 0], tf.int32)
                return tf.concat([self.embed(store), features[:, 1:]], axis=-1)
        ```

        ## Use instead
        Pass the ids as their own `keras.Input(..., dtype="int32")`, or build the layer (and
        its `Embedding`) with `dtype="float32"`.

        ## Fix safety
        No fix: how the ids should reach the layer is the author's choice. A whole parameter, or
        a column handed over without a cast, is left alone: callers often pass an int input.
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")
            class StoreFeatures(keras.layers.Layer):
                def __init__(self, n, dim, **kwargs):
                    super().__init__(**kwargs)
                    self.embed = keras.layers.Embedding(n, dim)
                def call(self, store_ids, dense):
                    return tf.concat([self.embed(store_ids), dense], axis=-1)
        """),
    ]
    INVALID = [
        Invalid("""
            import tensorflow as tf
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")
            class StoreFeatures(keras.layers.Layer):
                def __init__(self, n, dim, **kwargs):
                    super().__init__(**kwargs)
                    self.embed = keras.layers.Embedding(n, dim)
                def call(self, features):
                    store = tf.cast(features[:, 0], tf.int32)
                    return tf.concat([self.embed(store), features[:, 1:]], axis=-1)
        """),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        facts = dtype_facts(self.context)
        for cls in walk(node):
            if not isinstance(cls, cst.ClassDef):
                continue
            embeddings = self._id_layers(cls)
            for method in cls.body.body if embeddings else ():
                if isinstance(method, cst.FunctionDef) and len(method.params.params) >= 2:
                    self._method(facts, method, method.params.params[1].name.value, embeddings)

    def _id_layers(self, cls: cst.ClassDef) -> set[str]:
        """``self.x = keras.layers.Embedding(...)`` attributes of the class (layers that read ids)."""
        found = set()
        for statement in walk(cls):
            if not (isinstance(statement, cst.Assign) and isinstance(statement.value, cst.Call)):
                continue
            resolved = self.context.resolve(statement.value.func) or ""
            if not resolved.startswith("keras.") or resolved.rsplit(".", 1)[-1] not in keras_layers.READS_IDS:
                continue
            found.update(a for a in (self_attribute(t.target) for t in statement.targets) if a is not None)
        return found

    def _method(self, facts: DtypeFacts, method: cst.FunctionDef, inputs: str, embeddings: set[str]) -> None:
        for call in walk(method.body):
            if not isinstance(call, cst.Call) or self_attribute(call.func) not in embeddings or first_arg(call) is None:
                continue
            place = facts.place(call)
            ids = first_arg(call)
            value = facts.value_of(ids) if isinstance(ids, cst.Name) else None
            value = ids if value is None else value
            # The author casts the column to an integer dtype: it was float (an int column needs no cast). Without
            # the cast the column may be an int input the analysis takes for float16 (a model fitted on int pairs).
            spec = op_table.known(self.context.resolve(value.func)) if isinstance(value, cst.Call) else None
            dtype = argument(value, "dtype", 1) if spec is not None else None
            if spec is None or not spec.is_cast or dtype is None or \
                    facts.dtype_of_spelling(dtype.value, value) is not Dtype.INT:
                continue
            inner = first_arg(value)
            base = inner
            while isinstance(base, cst.Subscript):
                base = base.value
            # A column of the layer's (autocast) first input, not the whole parameter (often an int input).
            if place is None or not place.layer_method or base is inner or \
                    not (isinstance(base, cst.Name) and base.value == inputs) or \
                    facts.dtype_of(inner) is not Dtype.FLOAT16:
                continue
            self.report(value, "ids", ids=self.context.code(value), source=inputs)
