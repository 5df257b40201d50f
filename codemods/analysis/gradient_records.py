"""Records of the training-step model: statements, tapes, gradient and apply calls, optimizer builds,
flows and their gradient paths, with the states and kinds as enums (``gradient_path`` is the entry)."""

from __future__ import annotations

import builtins
import enum
from dataclasses import dataclass, field
from typing import Protocol

import libcst as cst

from mpfix.codemods._api_table import LSO, LSO_SPELLINGS
from mpfix.codemods._walk import walk
from mpfix.codemods.names import dotted_name


class GradientKind(str, enum.Enum):
    """How a gradient is computed."""

    TAPE = "tape"  # tape.gradient(loss, vars)
    TF_GRADIENTS = "tf.gradients"  # graph mode
    COMPUTE_GRADIENTS = "compute_gradients"  # a TF1 optimizer's

    def __str__(self) -> str:
        return self.value


_LSO_NAMES = {*LSO_SPELLINGS, "keras.mixed_precision.experimental.LossScaleOptimizer"}
SCALE_METHODS = ("scale_loss", "get_scaled_loss")
# `LossScaleOptimizer.inner_optimizer` (Keras 2 and 3): the optimizer it wraps, which neither unscales nor skips
# non-finite steps (Keras 3: `lso.inner_optimizer.apply_gradients` of scale_loss gradients steps x the scale).
LSO_INNER_ATTRIBUTE = "inner_optimizer"
UNSCALE_METHOD = "get_unscaled_gradients"
APPLY_METHODS = ("apply_gradients", "apply")
_NOT_OPTIMIZERS = {"schedules", "legacy", "experimental", "Optimizer", "serialize", "deserialize"}
_V1_LSO_NAMES = {
    "tensorflow.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer",
    "tensorflow.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer",
    "tensorflow.train.experimental.MixedPrecisionLossScaleOptimizer",
    "tensorflow.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite",
    "tensorflow.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite",
    "tensorflow.train.experimental.enable_mixed_precision_graph_rewrite",
}


def _is_v1_optimizer(qualified: str | None) -> bool:
    if not qualified:
        return False
    head, _, last = qualified.rpartition(".")
    return head in ("tensorflow.compat.v1.train", "tensorflow.train") and last.endswith("Optimizer") \
        and last != "Optimizer"


# --------------------------------------------------------------------------- records
@dataclass
class Statement:
    """A statement of a scope, with the compound statements around it (inside the scope)."""

    node: cst.BaseStatement = field(repr=False)
    parents: tuple[cst.BaseStatement, ...]
    conditional: bool  # under an if/else, try handler or while of this scope
    # (id of an if/try, which of its branches): two statements on different branches of one `if`
    # (or a try body and its handler) never both run in one pass.
    branch: tuple[tuple[int, int], ...] = ()


@dataclass
class Tape:
    name: str
    withs: list[cst.With] = field(default_factory=list)  # every `with` block recording on it
    persistent: bool = False


@dataclass
class GradientCall:
    call: cst.Call = field(repr=False)
    statement: Statement
    tape: str | None  # None for tf.gradients
    target: cst.BaseExpression = field(repr=False)  # the loss the gradient is taken of
    index: int = 0
    kind: GradientKind = GradientKind.TAPE
    optimizer: str | None = None  # compute_gradients: the optimizer that computes them


@dataclass
class ApplyCall:
    call: cst.Call = field(repr=False)
    statement: Statement
    optimizer: str  # the optimizer expression as written: "optimizer", "self.optimizer"
    gradients: set[int] = field(default_factory=set)  # indices of GradientCalls feeding it


@dataclass
class ScaleCall:
    call: cst.Call = field(repr=False)
    statement: Statement
    method: str  # scale_loss / get_scaled_loss / get_unscaled_gradients
    optimizer: str
    conditional: bool  # inside `x if c else y` or an if-statement: user-managed
    scope: "Scope | None" = field(default=None, repr=False)


# ----------------------------------------------------------------- gradient-path records
class State(str, enum.Enum):
    """What the loss scale has done to gradients so far (a str enum: its value reads as before)."""

    SCALED = "scaled"  # multiplied by the loss scale (gradient of scale_loss / get_scaled_loss)
    UNSCALED = "unscaled"  # plain gradients, or unscaled by get_unscaled_gradients
    MANUAL = "manually-unscaled"  # divided by the optimizer's scale by hand (`g / opt.dynamic_scale`)
    DIVIDED = "divided"  # unscaled once too often (or an unscaled value divided by the scale)

    def __str__(self) -> str:
        return self.value


class EventKind(str, enum.Enum):
    """What happens to gradients between their computation and an update."""

    # Transforms whose result depends on the size of the gradients: on scaled gradients they act
    # with a threshold (or noise scale) effectively divided by the loss scale.
    CLIP_GLOBAL_NORM = "clip_by_global_norm"
    CLIP_NORM = "clip_by_norm"
    CLIP_VALUE = "clip_by_value"
    CLIP_AVERAGE_NORM = "clip_by_average_norm"
    NOISE = "noise"
    CLIP_FACTOR = "clip_factor"  # `g * minimum(1, C / norm(g))`: a clip by hand
    HELPER = "helper"  # a same-file function that clips or adds noise
    CALLBACK = "callback"  # a same-file helper that runs functions its caller passed in (gradient callbacks)
    NORMALISE = "normalise"  # a same-file helper dividing gradients by their own size (scale-invariant)
    # An update under `if <gradient size> < <fixed threshold>:` (a loss-spike guard): on scaled gradients
    # the threshold is effectively divided by the loss scale.
    THRESHOLD = "threshold"
    # Linear transforms: the loss scale passes through them unchanged (the scale only changes inside
    # apply, so accumulating scaled micro-batch gradients between two applies is fine).
    ACCUMULATE = "accumulate"
    ALL_REDUCE = "all_reduce"
    UNSCALE = "unscale"  # get_unscaled_gradients
    MANUAL_UNSCALE = "manual_unscale"
    RESCALE = "rescale"  # multiplied by the optimizer's scale again (`ops.multiply(g, loss_scale)`)

    def __str__(self) -> str:
        return self.value


class OptimizerKind(str, enum.Enum):
    """The updating optimizer of a flow: it scales (an LSO, `loss_scale_factor`, compiled), it does not, or unknown."""

    LSO = "lso"
    PLAIN = "plain"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


SCALED, UNSCALED, MANUAL, DIVIDED = State.SCALED, State.UNSCALED, State.MANUAL, State.DIVIDED
_AFTER_UNSCALE = {SCALED: UNSCALED, UNSCALED: DIVIDED, MANUAL: DIVIDED}
_AFTER_MANUAL = {SCALED: MANUAL, UNSCALED: DIVIDED, MANUAL: DIVIDED}
# Times the scale: unscaled gradients carry it again (what a Keras 3 LossScaleOptimizer's apply expects).
_AFTER_RESCALE = {MANUAL: SCALED, UNSCALED: SCALED, DIVIDED: UNSCALED}
CLIP_GLOBAL_NORM, CLIP_NORM, CLIP_VALUE = EventKind.CLIP_GLOBAL_NORM, EventKind.CLIP_NORM, EventKind.CLIP_VALUE
NOISE, CALLBACK, THRESHOLD = EventKind.NOISE, EventKind.CALLBACK, EventKind.THRESHOLD
CLIP_FACTOR = EventKind.CLIP_FACTOR
SENSITIVE = frozenset({CLIP_GLOBAL_NORM, CLIP_NORM, CLIP_VALUE, EventKind.CLIP_AVERAGE_NORM, NOISE, CLIP_FACTOR,
                       EventKind.HELPER, CALLBACK, THRESHOLD, EventKind.NORMALISE})
ACCUMULATE, ALL_REDUCE = EventKind.ACCUMULATE, EventKind.ALL_REDUCE
UNSCALE, MANUAL_UNSCALE, RESCALE = EventKind.UNSCALE, EventKind.MANUAL_UNSCALE, EventKind.RESCALE

MANUAL_UNSCALE = "manual_unscale"

_TRANSFORM_FUNCTIONS = {
    "tensorflow.clip_by_global_norm": CLIP_GLOBAL_NORM,
    "tensorflow.clip_by_norm": CLIP_NORM,
    "tensorflow.clip_by_value": CLIP_VALUE,
    "tensorflow.clip_by_average_norm": EventKind.CLIP_AVERAGE_NORM,
    "tensorflow.compat.v1.clip_by_average_norm": EventKind.CLIP_AVERAGE_NORM,
    "tensorflow.math.clip_by_global_norm": CLIP_GLOBAL_NORM,
    "tensorflow.math.clip_by_norm": CLIP_NORM,
    "tensorflow.math.clip_by_value": CLIP_VALUE,
    "keras.ops.clip": CLIP_VALUE,
}
# Distribution strategies (what `with x.scope():` needs `x` to be for variables to be mirrored), by
# canonical name: the strategy a name is bound to decides, not the name.
STRATEGY_CONSTRUCTORS = frozenset({
    "tensorflow.distribute.MirroredStrategy",
    "tensorflow.distribute.MultiWorkerMirroredStrategy",
    "tensorflow.distribute.experimental.MultiWorkerMirroredStrategy",
    "tensorflow.distribute.TPUStrategy",
    "tensorflow.distribute.experimental.TPUStrategy",
    "tensorflow.distribute.OneDeviceStrategy",
    "tensorflow.distribute.experimental.CentralStorageStrategy",
    "tensorflow.distribute.ParameterServerStrategy",
    "tensorflow.distribute.experimental.ParameterServerStrategy",
    "tensorflow.distribute.get_strategy",
})
_ALL_REDUCE_METHODS = {"all_reduce", "allreduce", "batch_reduce_to", "reduce_to", "grouped_allreduce"}
_ACCUMULATE_METHODS = {"assign_add", "assign", "append", "extend"}
# Attributes that read an optimizer's loss scale: Keras 3's LSO `dynamic_scale`, tf_keras' `loss_scale`, and Keras 3's
# fixed `loss_scale_factor` (the base optimizer's attribute: apply_gradients divides by it).
_SCALE_ATTRIBUTES = {"dynamic_scale", "loss_scale", "loss_scale_factor"}
_BUILTINS = frozenset(dir(builtins))
_RANDOM_PREFIXES = ("tensorflow.random.", "keras.random.", "numpy.random.", "tensorflow.compat.v1.random.")




@dataclass
class PathEvent:
    """Something that happens to gradients between their computation and an update."""

    kind: EventKind
    node: cst.CSTNode = field(repr=False)  # the call (or binary operation) doing it
    statement: Statement = field(repr=False)
    states: frozenset  # states of the gradients going in
    optimizer: str | None = None  # UNSCALE / MANUAL_UNSCALE: whose scale
    helper: str | None = None  # a same-module function doing it
    carriers: tuple[int, ...] = ()  # a helper call's: the positions of its arguments that carry gradients

    @property
    def sensitive(self) -> bool:
        return self.kind in SENSITIVE


@dataclass
class GradientPath:
    """What happens to one gradient computation on its way into one update."""

    events: list[PathEvent] = field(default_factory=list)  # source order
    states: frozenset = frozenset()  # the states reaching the update

    def sensitive_on(self, state: State) -> list[PathEvent]:
        return [e for e in self.events if e.sensitive and state in e.states]

    def of_kind(self, kind: EventKind) -> list[PathEvent]:
        return [e for e in self.events if e.kind == kind]


@dataclass
class OptimizerBuild:
    """Where an optimizer (or LossScaleOptimizer) is constructed."""

    call: cst.Call = field(repr=False)
    target: str  # what it is assigned to: "optimizer", "self.opt", or "factory()" for a factory
    qualified: str  # canonical name of the constructor
    scope: "Scope" = field(repr=False)
    statement: Statement | None
    # A factory's build (`optimizer = build_optimizer(hp)`): statement is None, these are where it is called.
    site: Statement | None = field(default=None, repr=False)
    site_call: cst.Call | None = field(default=None, repr=False)

    @property
    def is_lso(self) -> bool:
        return self.qualified in _LSO_NAMES

    @property
    def has_loss_scale_factor(self) -> bool:
        return any(a.keyword is not None and a.keyword.value == "loss_scale_factor" for a in self.call.args)

    def scale_factor(self) -> cst.BaseExpression | None:
        """The fixed scale given as ``loss_scale_factor=`` (not ``None``), else None."""
        for arg in self.call.args:
            if arg.keyword is not None and arg.keyword.value == "loss_scale_factor":
                value = arg.value
                return None if isinstance(value, cst.Name) and value.value == "None" else value
        return None

    @property
    def is_v1(self) -> bool:
        """A TF1 optimizer (``tf.compat.v1.train.*Optimizer``), or its mixed-precision wrapper."""
        return self.qualified in _V1_LSO_NAMES or _is_v1_optimizer(self.qualified)

    @property
    def is_v1_lso(self) -> bool:
        return self.qualified in _V1_LSO_NAMES

    def inner(self) -> cst.BaseExpression | None:
        """The wrapped optimizer expression of an LSO build."""
        return next((a.value for a in self.call.args if (a.keyword is None and not a.star)
                     or (a.keyword is not None and a.keyword.value in ("inner_optimizer", "opt", "optimizer"))), None)


@dataclass
class Scope:
    node: cst.Module | cst.FunctionDef = field(repr=False)
    name: str
    class_name: str | None
    params: list[str]
    statements: list[Statement] = field(default_factory=list, repr=False)


@dataclass
class Flow:
    """One gradient computation feeding one optimizer update."""

    scope: Scope
    gradient: GradientCall
    apply: ApplyCall
    optimizer: str
    build: OptimizerBuild | None  # where the optimizer is built, when we can see it
    compiled: bool  # the optimizer is a compiled model's: Keras wrapped it under mixed_float16
    scale: ScaleCall | None  # the call that produced the gradient's target, if any
    scale_statement: Statement | None  # the assignment of the scaled loss
    unscaled: bool  # gradients pass through get_unscaled_gradients before the update
    user_managed: bool  # isinstance(..., LossScaleOptimizer) guard or conditional scaling
    path: GradientPath = field(default_factory=GradientPath)
    inner_of: OptimizerBuild | None = None  # the updating optimizer is this LSO build's `inner_optimizer`

    @property
    def kind(self) -> OptimizerKind:
        """The updating optimizer: LSO (scales: an LSO, `loss_scale_factor`, compiled), PLAIN or UNKNOWN."""
        wrapped = self.wrapped
        return OptimizerKind.UNKNOWN if wrapped is None else OptimizerKind.LSO if wrapped else OptimizerKind.PLAIN

    @property
    def wrapped(self) -> bool | None:
        """True: loss scaling is on for this optimizer; False: bare; None: cannot tell."""
        if self.compiled:
            return True
        if self.inner_of is not None:
            return False  # the wrapped optimizer of a visible LSO: it applies what it is given
        if self.build is None:
            return None
        return self.build.is_lso or self.build.has_loss_scale_factor


@dataclass
class Analysis:
    scopes: list[Scope]
    flows: list[Flow]
    builds: list[OptimizerBuild]
    tapes: dict[int, dict[str, Tape]]  # id(scope.node) -> tape name -> tape
    scale_calls: list[ScaleCall]
    isinstance_guard: bool
    # `opt.minimize(loss, ...)` without a tape: gradient and update in one call (TF1 style).
    minimizes: list[tuple[Scope, ApplyCall, OptimizerBuild | None]] = field(default_factory=list)
    # Every gradient computation, whether or not an update in the same scope uses it.
    gradients: list[tuple[Scope, GradientCall]] = field(default_factory=list)
    # Updates in one function of gradients accumulated in another (through a shared object).
    cross_flows: list[Flow] = field(default_factory=list)

    def build_of(self, scope: Scope, optimizer: str) -> OptimizerBuild | None:
        """Where ``optimizer`` (as written in ``scope``) is built, when the file shows it."""
        found = [b for b in self.builds if b.target == optimizer and (b.scope is scope or b.scope.class_name
                 and b.scope.class_name == scope.class_name and optimizer.startswith("self."))]
        found = found or [b for b in self.builds if b.target == optimizer and isinstance(b.scope.node, cst.Module)]
        return found[-1] if found else None

    keras: int = 3  # the generation the file runs under (RuleContext.keras)
    bindings: object = field(default=None, repr=False)  # the binding model (analysis.bindings.Bindings)
    helpers: object = field(default=None, repr=False)  # same-file functions gradients go to (gradient_values._Helpers)

    def applied(self, flow: Flow) -> frozenset:
        """What the updating optimizer really applies, by Keras generation: Keras 3's LSO (and a
        `loss_scale_factor` optimizer) divides by its scale inside apply, Keras 2's does not.

        UNSCALED: right; SCALED: multiplied by the loss scale; DIVIDED: divided by it (unscaled
        twice, or a plain loss whose gradients the LSO still divides). An unknown optimizer counts as
        plain here."""
        if self.keras == 3 and flow.kind is OptimizerKind.LSO:
            mapping = {SCALED: UNSCALED, UNSCALED: DIVIDED, MANUAL: DIVIDED}
        else:
            mapping = {MANUAL: UNSCALED}
        return frozenset(mapping.get(s, s) for s in flow.path.states)

    def enclosing(self, scope: Scope) -> list[Scope]:
        """The functions ``scope`` is nested in, innermost first."""
        outer = [s for s in self.scopes if _encloses(s.node, scope.node)]  # scopes are in pre-order
        return outer[::-1]

    def inner_build(self, build: OptimizerBuild) -> cst.Call | None:
        """The constructor call of the optimizer an LSO build wraps, where it is visible."""
        inner = build.inner()
        if isinstance(inner, cst.Call):
            return inner
        name = dotted_name(inner) if inner is not None else None
        if name is None:
            return None
        before = [b for b in self.builds if b.target == name and not b.is_lso
                  and (b.scope is build.scope or isinstance(b.scope.node, cst.Module))]
        return before[-1].call if before else None

    def second_order(self, flow: Flow) -> bool:
        """Another gradient is taken while the flow's tape records (nested tapes): the flow's gradient
        is of a value built from gradients (a gradient penalty, a Hessian-vector product)."""
        tape = self.tape_of(flow)
        if tape is None:
            return False
        return any(g is not flow.gradient and scope is flow.scope and any(w in g.statement.parents for w in tape.withs)
                   for scope, g in self.gradients)

    def tape_of(self, flow: Flow) -> Tape | None:
        if flow.gradient.tape is None:
            return None
        return self.tapes.get(id(flow.scope.node), {}).get(flow.gradient.tape)


def _encloses(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    """``outer`` is a function whose body holds ``inner`` (a nested function: a closure)."""
    return outer is not inner and isinstance(outer, cst.FunctionDef) and any(n is inner for n in walk(outer.body))


class FileView(Protocol):
    """What the training-step model reads of a file (``RuleContext`` is one)."""

    module: cst.Module
    keras: int
    cache: dict

    def resolve(self, node: cst.BaseExpression) -> str | None: ...

    def code(self, node: cst.CSTNode) -> str: ...
