"""MP210: a Keras Normalization layer (statistics of raw data) computing in float16 under mixed_float16."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._mp_api_support import find_arg, string_value
from mpfix.codemods._walk import walk
from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.codemods.facts import keras_layers
from mpfix.findings import FixSafety
from mpfix.project.files import is_test_code

# dtype= spellings that leave the layer in float16 under the mixed policy (any other value is the author's choice).
_FLOAT16_SPELLINGS = frozenset({"float16", "mixed_float16"})


def _numbers(node: cst.BaseExpression) -> list[float] | None:
    """The numbers a literal (a number, a list/tuple of them, arithmetic of literals) holds; None otherwise."""
    if isinstance(node, (cst.List, cst.Tuple)):
        found = [_numbers(e.value) for e in node.elements]
        return None if any(f is None for f in found) else [n for f in found for n in f]
    if isinstance(node, (cst.Integer, cst.Float)):
        return [float(node.evaluated_value)]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _numbers(node.expression)
        return None if inner is None or len(inner) != 1 else [-inner[0]]
    if isinstance(node, cst.BinaryOperation):
        left, right = _numbers(node.left), _numbers(node.right)
        if left is None or right is None or len(left) != 1 or len(right) != 1:
            return None
        a, b = left[0], right[0]
        ops = {cst.Add: lambda: a + b, cst.Subtract: lambda: a - b, cst.Multiply: lambda: a * b,
               cst.Divide: lambda: a / b if b else None, cst.Power: lambda: a ** b if abs(b) < 8 else None}
        value = ops.get(type(node.operator), lambda: None)()
        return None if value is None else [float(value)]
    return None


def _small_statistics(mean: cst.BaseExpression, variance: cst.BaseExpression) -> bool:
    """Literal statistics that float16 holds (the layer casts the variance itself) of data that stays inside its
    range: every variance and every |mean| + 4 standard deviations < 65504."""
    means, variances = _numbers(mean), _numbers(variance)
    if not means or not variances or min(variances) < 0:
        return False
    return max(variances) < 65504 and max(abs(m) for m in means) + 4 * max(variances) ** 0.5 < 65504


class Float16NormalizationLayer(Rule):
    code = "MP210"
    name = "float16-normalization-layer"
    message = ("A Normalization layer computes in float16 under mixed_float16: raw inputs or variances past 65504 "
               "become inf; build it with dtype=\"float32\"")
    messages = {
        "layer": ("`{layer}` computes in float16 under mixed_float16: Keras casts its input and its mean and variance "
                  "(statistics of the raw data it standardises) to float16, so a raw value past 65504, or a variance "
                  "past 65504 (a standard deviation past 256), is inf and the standardised column inf/inf = NaN or 0; "
                  "build it with dtype=\"float32\" (the layers after it cast its output back to float16)"),
    }
    fix_safety = FixSafety.NONE  # report only: a float32 output may meet float16 tensors in a subclassed call
    uses = frozenset()  # the call, its assignment and `.adapt(` calls: no per-file fact
    requires_float16 = True
    # The layer's own name, not inside another's: `LayerNormalization`/`BatchNormalization` (float32 compute) would
    # otherwise send 10 more tf-models files to the parse (289 against 279 at dad6bf7). A call `resolve` makes
    # keras.layers.Normalization spells the name after `.`, a space or `import`, or calls a name bound to it.
    triggers = (re.compile(r"(?<!\w)(?:" + "|".join(sorted(map(re.escape, keras_layers.RAW_STATISTICS_LAYERS)))
                           + r")\b"),)
    explanation = """
        ## What it does
        Finds a Keras `Normalization` layer built without `dtype="float32"` under a
        `mixed_float16` policy: the layer that standardises raw feature columns inside the
        model (`norm.adapt(train_x)`, or `mean=`/`variance=` given).

        ## Why is this bad?
        Both Keras generations cast the layer's input and its adapted mean and variance to
        the compute dtype, float16, before `(x - mean) / sqrt(variance)`. Raw columns are what
        the layer is for: an income of 70000 is inf in float16, and so is the variance of any
        column whose standard deviation passes 256 (annual kWh, prices, seconds). The
        standardised column becomes inf/inf = NaN (or x/inf = 0), and the loss is NaN from the
        first step (a tabular regressor adapted on incomes and kWh: every row's income column
        NaN; with `dtype="float32"`: loss 0.83 -> 0.08 in 4 epochs).

        ## Example
        ```python
        keras.mixed_precision.set_global_policy("mixed_float16")
        norm = keras.layers.Normalization()
        norm.adapt(raw_features)
        ```

        ## Use instead
        ```python
        norm = keras.layers.Normalization(dtype="float32")
        ```
        The next Keras layer casts the float32 output back to float16.

        Test code is left alone (test modules, as MP205 does).

        ## Fix safety
        No fix: in a subclassed model the float32 output may meet float16 tensors in TensorFlow
        ops (a dtype error). Data already in small units (pixels in [0, 1]) is safe in float16.
    """
    VALID = [
        Valid("""
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")
            norm = keras.layers.Normalization(dtype="float32")
            norm.adapt(train_x)
        """),
        # bfloat16 has float32's range.
        Valid("""
            import keras
            keras.mixed_precision.set_global_policy("mixed_bfloat16")
            norm = keras.layers.Normalization()
            norm.adapt(train_x)
        """),
        # ImageNet's statistics of 0-255 pixels, written out: the data fits float16 (convnext's PreStem).
        Valid("""
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")
            h = keras.layers.Normalization(mean=[0.485 * 255, 0.456 * 255], variance=[(0.229 * 255) ** 2, 0.05])(x)
        """),
        # Never adapted and given no statistics: it standardises nothing (mean 0, variance 1).
        Valid("""
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")
            h = keras.layers.Normalization(axis=-1)(features)
        """),
        # LayerNormalization computes in float32 (another layer).
        Valid("""
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")
            norm = keras.layers.LayerNormalization(epsilon=1e-12)
        """),
    ]
    INVALID = [
        Invalid("""
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")
            norm = keras.layers.Normalization(axis=-1)
            norm.adapt(train_x)
        """),
        Invalid("""
            import os
            os.environ["TF_USE_LEGACY_KERAS"] = "1"
            import tf_keras as keras
            keras.mixed_precision.set_global_policy("mixed_float16")
            inputs = keras.Input((6,))
            h = keras.layers.Normalization(mean=mean, variance=variance)(inputs)
        """, keras=2),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        if is_test_code(self.context.path):
            return  # a layer's unit tests adapt it on toy data under forced policies (as MP205 leaves test code alone)
        # An un-adapted layer without statistics standardises nothing (mean 0, variance 1: wave 5's audio_logmel_k3).
        adapted = {self.context.code(call.func.value) for call in walk(node) if isinstance(call, cst.Call)
                   and isinstance(call.func, cst.Attribute) and call.func.attr.value == "adapt"}
        assigns = [a for a in walk(node) if isinstance(a, cst.Assign)]
        bound = {id(a.value): {self.context.code(t.target) for t in a.targets} for a in assigns}
        # A name bound once in the module stands for its value (`mean = [0.485, ...]` just above the layer).
        values: dict[str, list[cst.BaseExpression]] = {}
        for a in assigns:
            for t in a.targets:
                if isinstance(t.target, cst.Name):
                    values.setdefault(t.target.value, []).append(a.value)
        once = {name: found[0] for name, found in values.items() if len(found) == 1}
        for call in walk(node):
            if not isinstance(call, cst.Call) or not self._float16_layer(call):
                continue
            mean, variance = find_arg(call, keyword="mean", position=1), find_arg(call, keyword="variance", position=2)
            if mean is not None and variance is not None and _small_statistics(
                    *(once.get(a.value.value, a.value) if isinstance(a.value, cst.Name) else a.value
                      for a in (mean[1], variance[1]))):
                continue  # literal statistics of small data (ImageNet's of 0-255 pixels: variance <= 3400)
            if mean is not None or bound.get(id(call), set()) & adapted:
                self.report(call, "layer", layer=self.context.code(call.func))

    def _float16_layer(self, call: cst.Call) -> bool:
        resolved = self.context.resolve(call.func) or ""
        if not resolved.startswith("keras.") or resolved.rsplit(".", 1)[-1] not in keras_layers.RAW_STATISTICS_LAYERS:
            return False
        spec = keras_layers.layer(resolved, self.context.keras)
        dtype = find_arg(call, keyword="dtype")
        # float32, a policy object, a variable: the author chose
        return spec is not None and spec.raw_statistics and (
            dtype is None or string_value(dtype[1].value) in _FLOAT16_SPELLINGS)
