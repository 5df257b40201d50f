"""The records of cross-file calls (``mpfix.project.crosscalls`` finds them): what travels in ``ProjectFileFacts``.

The per-file dtype inference reads them through ``RuleContext.project`` only (their properties), and the
file's cache key holds them (``to_json``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class CallContext(str, enum.Enum):
    """Where a cross-file call runs."""

    LAYER_CALL = "layer-call"  # a Keras layer's call (or a method it reaches): float16 activations
    TRAIN_STEP = "train-step"  # a Keras model's train/test/predict step
    HELPER = "helper"  # a module function of a third file that float16 code calls with its activations
    PLAIN = "plain"  # anywhere else (recorded only for Keras instances it passes)

    @property
    def float16(self) -> bool:
        return self is not CallContext.PLAIN


class ArgKind(str, enum.Enum):
    """What a call site passes for one parameter."""

    TENSOR = "tensor"  # a value of the caller's compute (float16 in a float16 context)
    FLOAT32 = "float32"  # tf.cast(..., tf.float32), a dtype=float32 constructor
    NUMBER = "number"  # a literal
    UNKNOWN = "unknown"  # an attribute (`self.act_type`), a subscript: the scan cannot judge it
    KERAS_INSTANCE = "keras-instance"  # an instance of a project Keras layer/model class
    # Structural typing (``mpfix.project.structural``): what the function reads of the parameter a plain project
    # class defines too, so no class of its own file may type it a Keras instance (the project's answer wins).
    NOT_KERAS = "not-keras"
    # A callable that runs a project Keras layer/model instance (``lambda x: self._model(x, training=False)``,
    # ``net.call``): a call of the parameter returns what the model computes, the compute dtype (research DELF's
    # export_local_model.py hands ``ExtractLocalFeatures`` such a lambda).
    KERAS_CALLABLE = "keras-callable"


@dataclass(frozen=True, order=True)
class CrossCall:
    """One call of a module function of a file, as another file (or, for Keras instances, any) makes it."""

    function: str
    context: CallContext
    args: tuple[tuple[str, ArgKind], ...]  # parameter name -> what this call site passes

    def passes(self, kind: ArgKind) -> frozenset[str]:
        return frozenset(name for name, k in self.args if k is kind)

    # What the per-file dtype inference reads (it sees this record through ``ProjectFileFacts`` only).
    @property
    def float16(self) -> bool:
        """Called from float16 code: the function is a helper of a float16 region."""
        return self.context.float16

    @property
    def keras_instances(self) -> frozenset[str]:
        return self.passes(ArgKind.KERAS_INSTANCE)

    @property
    def keras_callables(self) -> frozenset[str]:
        return self.passes(ArgKind.KERAS_CALLABLE)

    @property
    def not_keras(self) -> frozenset[str]:
        return self.passes(ArgKind.NOT_KERAS)

    @property
    def tensors(self) -> frozenset[str]:
        return self.passes(ArgKind.TENSOR)

    @property
    def unknown(self) -> frozenset[str]:
        return self.passes(ArgKind.UNKNOWN)

    @property
    def float32(self) -> frozenset[str]:
        return self.passes(ArgKind.FLOAT32)

    @property
    def numbers(self) -> frozenset[str]:
        return self.passes(ArgKind.NUMBER)

    def to_json(self) -> list:
        return [self.function, self.context.value, [[n, k.value] for n, k in self.args]]

    @classmethod
    def from_json(cls, data: list) -> "CrossCall":
        function, context, args = data
        return cls(str(function), CallContext(context), tuple((str(n), ArgKind(k)) for n, k in args))
