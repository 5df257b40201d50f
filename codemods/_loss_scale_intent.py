"""What an old loss-scale argument asked for, as arguments of today's `LossScaleOptimizer`.

Shared by MP302 (``LossScaleOptimizer(opt, loss_scale=...)``) and MP305
(``enable_mixed_precision_graph_rewrite(opt, loss_scale=...)``). No rules live here.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods import _api_table as table
from mpfix.codemods._mp_api_support import find_arg, keyword_arg, number_value, string_value
from mpfix.codemods.names import dotted_name


class Intent:
    """What an old LossScaleOptimizer call asked for: dynamic (optionally tuned) or a fixed scale."""

    def __init__(self, fixed: cst.BaseExpression | None = None,
                 initial: cst.BaseExpression | None = None,
                 growth: cst.BaseExpression | None = None,
                 lost: str | None = None) -> None:
        self.fixed = fixed
        self.initial = initial
        self.growth = growth
        self.lost = lost  # a setting the modern API cannot express

    def arguments(self, keras: int) -> list[cst.Arg]:
        if self.fixed is not None:
            if keras == table.KERAS2:
                return [keyword_arg("dynamic", "False"), keyword_arg("initial_scale", self.fixed)]
            return [keyword_arg("initial_scale", self.fixed)]
        args = []
        if self.initial is not None:
            args.append(keyword_arg("initial_scale", self.initial))
        if self.growth is not None:
            args.append(keyword_arg("dynamic_growth_steps", self.growth))
        return args


def loss_scale_intent(value: cst.BaseExpression) -> Intent | None:
    """What an old ``loss_scale`` value asked for; None when mpfix cannot read it."""
    text = string_value(value)
    if text is not None:
        return Intent() if text == "dynamic" else None
    if number_value(value) is not None or isinstance(value, cst.BinaryOperation) and all(
            number_value(side) is not None for side in (value.left, value.right)):
        return Intent(fixed=value)
    if isinstance(value, cst.Call):
        func = dotted_name(value.func) or ""
        last = func.rpartition(".")[2]
        if last == "FixedLossScale":
            found = find_arg(value, keyword="loss_scale_value", position=0)
            return Intent(fixed=found[1].value) if found else None
        if last == "DynamicLossScale":
            initial = find_arg(value, keyword="initial_loss_scale", position=0)
            growth = find_arg(value, keyword="increment_period", position=1)
            multiplier = find_arg(value, keyword="multiplier", position=2)
            lost = "its `multiplier` has no equivalent: the scale now doubles/halves" if multiplier else None
            return Intent(initial=initial[1].value if initial else None,
                           growth=growth[1].value if growth else None, lost=lost)
    return None
