"""Every mixed-precision API that moved, in one table (the model: Ruff's NPY201).

A row says what an old API is called, what it is called under each Keras
generation, and where the fact comes from. Rules MP301/MP303/MP304/MP305 read
this table; only changes that also move arguments are code (in the rules).
``tests/rules/test_api_drift.py`` imports every replacement named here from
the installed TensorFlow/Keras, under Keras 3 and Keras 2, so a wrong row fails
CI instead of writing a fix that crashes.

Names are canonical (``codemods.names.canonical``): every spelling of Keras is
``keras.…``, TensorFlow is ``tensorflow.…``. Members of ``LossScaleOptimizer``
are written ``LossScaleOptimizer.<member>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

KERAS2 = 2
KERAS3 = 3

# The stable module every ``experimental`` spelling moves to.
MIXED_PRECISION = "keras.mixed_precision"
EXPERIMENTAL = "keras.mixed_precision.experimental"
LSO = "keras.mixed_precision.LossScaleOptimizer"
# Every stable spelling of the LossScaleOptimizer class: Keras 3 also exports it as
# ``keras.optimizers.LossScaleOptimizer`` (the same class; ``tf.keras.optimizers`` too under Keras 3).
LSO_SPELLINGS = frozenset({LSO, "keras.optimizers.LossScaleOptimizer"})
REMOVE_CALL = "<remove the call, keep its argument>"


@dataclass(frozen=True)
class ApiChange:
    """One moved API: ``old`` becomes ``new[generation]`` (None: unchanged there)."""

    old: str
    new: dict[int, str | None]
    kind: Literal["name", "member", "rewrite"]
    reference: str

    def target(self, keras: int) -> str | None:
        return self.new.get(keras)

    @property
    def old_last(self) -> str:
        return self.old.rpartition(".")[2]


def _both(new: str) -> dict[int, str | None]:
    return {KERAS2: new, KERAS3: new}


# The stable ``tf.keras.mixed_precision`` API (set_global_policy, LossScaleOptimizer(dynamic=,
# initial_scale=)) that MP301/MP302 write appeared in TF 2.4: a project pinned below it keeps its own.
STABLE_SINCE = (2, 4)
_EXPERIMENTAL_REMOVED = "mixed_precision.experimental was removed in TF 2.9 (deprecated since TF 2.4)"

API_CHANGES: tuple[ApiChange, ...] = (
    # --- MP301: the experimental namespace, gone in both generations ----------------------
    ApiChange(EXPERIMENTAL, _both(MIXED_PRECISION), "name", _EXPERIMENTAL_REMOVED),
    ApiChange(f"{EXPERIMENTAL}.set_policy", _both(f"{MIXED_PRECISION}.set_global_policy"), "name",
              _EXPERIMENTAL_REMOVED + "; set_policy became set_global_policy"),
    ApiChange(f"{EXPERIMENTAL}.global_policy", _both(f"{MIXED_PRECISION}.global_policy"), "name",
              _EXPERIMENTAL_REMOVED),
    ApiChange(f"{EXPERIMENTAL}.Policy", _both(f"{MIXED_PRECISION}.Policy"), "name",
              _EXPERIMENTAL_REMOVED + "; Policy lost its loss_scale argument (MP301 drops it)"),
    ApiChange(f"{EXPERIMENTAL}.LossScaleOptimizer", _both(LSO), "name",
              _EXPERIMENTAL_REMOVED + "; LossScaleOptimizer lost loss_scale= (MP302 rewrites it)"),
    # --- MP303: how a custom loop scales, per generation ---------------------------------------
    ApiChange("LossScaleOptimizer.get_scaled_loss", {KERAS3: "LossScaleOptimizer.scale_loss"}, "member",
              "Keras 3 optimizers have scale_loss; get_scaled_loss is Keras 2 only (AttributeError)"),
    ApiChange("LossScaleOptimizer.get_unscaled_gradients", {KERAS3: REMOVE_CALL}, "member",
              "Keras 3 LossScaleOptimizer.apply_gradients unscales by itself; the method is Keras 2 only"),
    ApiChange("LossScaleOptimizer.scale_loss", {KERAS2: "LossScaleOptimizer.get_scaled_loss"}, "member",
              "Keras 2 scales with get_scaled_loss and must unscale with get_unscaled_gradients"),
    # --- MP304: the current loss scale ----------------------------------------------------------
    ApiChange("LossScaleOptimizer.loss_scale", {KERAS3: "LossScaleOptimizer.dynamic_scale"}, "member",
              "Keras 3 exposes the current scale as dynamic_scale (a variable, once built)"),
    ApiChange("LossScaleOptimizer.dynamic_scale", {KERAS2: "LossScaleOptimizer.loss_scale"}, "member",
              "Keras 2 exposes the current scale as loss_scale (a tensor)"),
    # --- MP305: the graph rewrite, replaced by a Keras policy plus a LossScaleOptimizer ---------
    ApiChange("tensorflow.train.experimental.enable_mixed_precision_graph_rewrite", _both(LSO), "rewrite",
              "removed from TF 2 (TF 2.4 deprecated it); the Keras mixed precision API replaces it"),
    ApiChange("tensorflow.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite", _both(LSO),
              "rewrite", "TF1 graph rewrite; does not compose with Keras policies"),
    ApiChange("tensorflow.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite", _both(LSO),
              "rewrite", "TF1 graph rewrite; does not compose with Keras policies"),
    ApiChange("tensorflow.config.optimizer.set_experimental_options", _both(f"{MIXED_PRECISION}.set_global_policy"),
              "rewrite", "grappler auto_mixed_precision casts ops behind Keras' back and never scales the loss"),
)

BY_OLD: dict[str, ApiChange] = {change.old: change for change in API_CHANGES}
MEMBER_CHANGES: dict[str, ApiChange] = {
    change.old_last: change for change in API_CHANGES if change.kind == "member"
}

# Keyword arguments each generation's LossScaleOptimizer constructor accepts (MP302 keeps
# these and writes only these). Checked against the installed signatures by the tests.
LSO_KEYWORDS: dict[int, tuple[str, ...]] = {
    KERAS3: ("inner_optimizer", "initial_scale", "dynamic_growth_steps", "name"),
    KERAS2: ("inner_optimizer", "dynamic", "initial_scale", "dynamic_growth_steps"),
}
# Arguments that no current LossScaleOptimizer/Policy accepts (TF ≤ 2.3 forms).
LEGACY_LSO_KEYWORD = "loss_scale"
LEGACY_POLICY_KEYWORD = "loss_scale"
# TF 2.2-era ``DynamicLossScale(initial_loss_scale=, increment_period=)`` → LSO keywords.
DYNAMIC_LOSS_SCALE_KEYWORDS = {"initial_loss_scale": "initial_scale", "increment_period": "dynamic_growth_steps"}
# Method names each generation's optimizer has for a custom loop; the tests check them.
SCALING_METHODS: dict[int, tuple[str, ...]] = {
    KERAS3: ("scale_loss",),
    KERAS2: ("get_scaled_loss", "get_unscaled_gradients"),
}
# Spelled like the installed API: the tests look each one up on tf.keras and tf_keras.
POLICY_SETTER = f"{MIXED_PRECISION}.set_global_policy"
GRAPH_REWRITE_FUNCTION = "enable_mixed_precision_graph_rewrite"
GRAPPLER_OPTION = "auto_mixed_precision"


# Reading a member as a Python number (`float(...)`, `int(...)`): what the target generation's member needs
# first. Keras 3's `dynamic_scale` is a variable: float() of it fails once it is a MirroredVariable (built under
# a distribution strategy; TF 2.21 / keras 3.15), float() of its `.numpy()` works everywhere float() did.
AS_NUMBER: dict[tuple[str, int], str] = {("LossScaleOptimizer.dynamic_scale", KERAS3): "numpy"}


def member_target(member: str, keras: int) -> str | None:
    """The member name ``member`` becomes under ``keras``, or None if it stays."""
    change = MEMBER_CHANGES.get(member)
    if change is None:
        return None
    target = change.target(keras)
    if target is None or target == REMOVE_CALL:
        return target
    return target.rpartition(".")[2]
