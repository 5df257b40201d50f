"""API drift, part 1: removed namespaces and constructor arguments (MP301, MP302).

Scripts written for TF 2.1–2.8 crash on today's TensorFlow before they train:
``tf.keras.mixed_precision.experimental`` is gone (TF 2.9), and the
``loss_scale=`` argument of ``Policy``/``LossScaleOptimizer`` is a TypeError or
ValueError in both Keras generations. Renames come from ``_api_table``; the
argument rewrites, which depend on the Keras generation, are code here.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import find_all

from mpfix.codemods import _api_table as table
from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.codemods._mp_api_support import (
    attribute_uses,
    bool_value,
    find_arg,
    keyword_arg,
    name_uses,
    number_value,
    rewrite_args,
    string_value,
)
from mpfix.codemods.names import canonical, dotted_name
from mpfix.findings import FixSafety

_POLICY_NAMES = (f"{table.MIXED_PRECISION}.Policy", f"{table.EXPERIMENTAL}.Policy")
# Classes of TF ≤ 2.3 that MP302 turns into LossScaleOptimizer arguments: not reported by MP301.
_LOSS_SCALE_CLASSES = ("LossScale", "DynamicLossScale", "FixedLossScale")


def _module_expr(dotted: str) -> cst.Attribute | cst.Name:
    expr = cst.parse_expression(dotted)
    assert isinstance(expr, (cst.Attribute, cst.Name))
    return expr


class ExperimentalMixedPrecisionApi(Rule):
    code = "MP301"
    name = "experimental-mixed-precision-api"
    message = ("`mixed_precision.experimental` was removed in TF 2.9; use the stable "
               "`tf.keras.mixed_precision` names")
    fix_safety = FixSafety.SAFE
    triggers = ("mixed_precision.experimental", "mixed_precision import experimental", "loss_scale")
    explanation = """
        ## What it does
        Finds uses of `tf.keras.mixed_precision.experimental` (`set_policy`, `Policy`,
        `global_policy`, `LossScaleOptimizer`), in every import form, and
        `Policy("mixed_float16", loss_scale=...)`.

        ## Why is this bad?
        The experimental namespace was deprecated in TF 2.4 and removed in TF 2.9:
        `AttributeError`/`ImportError` before the first step. `Policy` lost its `loss_scale`
        argument at the same time (`TypeError` in Keras 2 and Keras 3): the loss scale lives on
        the optimizer (`LossScaleOptimizer`), which `model.compile` adds by itself under
        `mixed_float16`.

        ## Example
        ```python
        from tensorflow.keras.mixed_precision import experimental as mixed_precision

        policy = mixed_precision.Policy("mixed_float16", loss_scale="dynamic")
        mixed_precision.set_policy(policy)
        ```

        ## Use instead
        ```python
        from tensorflow.keras import mixed_precision

        policy = mixed_precision.Policy("mixed_float16")
        mixed_precision.set_global_policy(policy)
        ```

        ## Fix safety
        Safe for the renames (same function under its stable name) and for dropping
        `loss_scale="dynamic"` (dynamic scaling is what `compile` sets up by default). Dropping a
        numeric `loss_scale=N` is unsafe: `compile` then scales dynamically; put
        `LossScaleOptimizer(opt, ...)` (see MP302) on the optimizer to keep a fixed scale.
    """
    VALID = [
        Valid("""
            import tensorflow as tf
            from tensorflow.keras import mixed_precision

            mixed_precision.set_global_policy("mixed_float16")
            policy = tf.keras.mixed_precision.Policy("mixed_float16")
            print(tf.keras.mixed_precision.global_policy())
        """),
        # tf.experimental is not the mixed-precision namespace.
        Valid("""
            import tensorflow as tf

            x = tf.experimental.numpy.ones(3)
            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())
        """),
        # A user's own Policy class with a loss_scale argument.
        Valid("""
            class Policy:
                def __init__(self, name, loss_scale=None):
                    self.loss_scale = loss_scale

            p = Policy("mixed_float16", loss_scale="dynamic")
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
            print(tf.keras.mixed_precision.experimental.global_policy())
            """,
            """
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            print(tf.keras.mixed_precision.global_policy())
            """,
            count=2,
        ),
        # The TF 2.1–2.3 guide's import, with the policy's loss_scale.
        Invalid(
            """
            from tensorflow.keras.mixed_precision import experimental as mixed_precision

            policy = mixed_precision.Policy("mixed_float16", loss_scale="dynamic")
            mixed_precision.set_policy(policy)
            """,
            """
            from tensorflow.keras import mixed_precision

            policy = mixed_precision.Policy("mixed_float16")
            mixed_precision.set_global_policy(policy)
            """,
            count=3,
        ),
        Invalid(
            """
            from tensorflow.keras.mixed_precision.experimental import LossScaleOptimizer, set_policy

            set_policy("mixed_float16")
            opt = LossScaleOptimizer(make_optimizer())
            """,
            """
            from tensorflow.keras.mixed_precision import LossScaleOptimizer, set_global_policy

            set_global_policy("mixed_float16")
            opt = LossScaleOptimizer(make_optimizer())
            """,
        ),
        Invalid(
            """
            import tensorflow.keras.mixed_precision.experimental as mpx

            mpx.set_policy(
                mpx.Policy(
                    "mixed_float16",  # float16 compute, float32 variables
                    loss_scale=128,  # fixed scale
                )
            )
            """,
            """
            import tensorflow.keras.mixed_precision as mpx

            mpx.set_global_policy(
                mpx.Policy(
                    "mixed_float16",  # float16 compute, float32 variables
                )
            )
            """,
            count=3,
        ),
    ]

    def _renamed_member(self, member: str) -> str | None:
        """The stable name of ``experimental.<member>`` when it differs, else None."""
        change = table.BY_OLD.get(f"{table.EXPERIMENTAL}.{member}")
        if change is None:
            return None
        new = (change.target(self.context.keras) or change.old).rpartition(".")[2]
        return new if new != member else None

    def _experimental_renamed_to(self) -> str | None:
        """``mixed_precision`` when ``from ….mixed_precision import experimental`` is rewritten with its uses."""
        cached = getattr(self, "_renamed_cache", False)
        if cached is not False:
            return cached
        result = None
        for node in find_all(self.context.module, cst.ImportFrom):
            assert isinstance(node, cst.ImportFrom)
            base = dotted_name(node.module) if node.module is not None and not node.relative else None
            if (base and canonical(base) == table.MIXED_PRECISION and not isinstance(node.names, cst.ImportStar)
                    and len(node.names) == 1 and dotted_name(node.names[0].name) == "experimental"
                    and node.names[0].asname is None
                    and name_uses(self.context.module, "experimental") is not None):
                result = base.rpartition(".")[2]
        self._renamed_cache = result
        return result

    def visit_Import(self, node: cst.Import) -> None:
        changed = False
        names = []
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is not None and canonical(full) == table.EXPERIMENTAL:
                names.append(alias.with_changes(name=_module_expr(full.rpartition(".")[0])))
                changed = True
            else:
                names.append(alias)
        if changed:
            self.report(node, "`mixed_precision.experimental` was removed in TF 2.9; import `mixed_precision`",
                        fix={node: node.with_changes(names=names)},
                        description="Import the stable `mixed_precision` module")

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None:
            return
        base = dotted_name(node.module)
        if base is None:
            return
        if canonical(base) == table.MIXED_PRECISION and not isinstance(node.names, cst.ImportStar):
            self._import_of_experimental(node, base)
        elif canonical(base) == table.EXPERIMENTAL:
            self._import_from_experimental(node, base)

    def _import_of_experimental(self, node: cst.ImportFrom, base: str) -> None:
        """``from tensorflow.keras.mixed_precision import experimental [as mp]``."""
        assert not isinstance(node.names, cst.ImportStar)
        aliases = [a for a in node.names if dotted_name(a.name) == "experimental"]
        if not aliases:
            return
        message = ("`mixed_precision.experimental` was removed in TF 2.9; "
                   "`from tensorflow.keras import mixed_precision` instead")
        if len(node.names) != 1:
            self.report(node, message + " (mpfix does not split this import)")
            return
        alias = aliases[0]
        parent, _, module_name = base.rpartition(".")
        changes: dict[cst.CSTNode, cst.CSTNode] = {}
        local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
        asname = None
        if local is None:
            found = attribute_uses(self.context.module, "experimental")
            if found is None:
                asname = cst.AsName(name=cst.Name("experimental"))
            else:
                uses, attribute_of = found
                for use in uses:
                    attribute = attribute_of.get(use)
                    if attribute is not None and self._renamed_member(attribute.attr.value):
                        continue  # visit_Attribute renames ``experimental.set_policy`` as a whole
                    changes[use] = use.with_changes(value=module_name)
        elif local != module_name:
            asname = alias.asname
        new_alias = cst.ImportAlias(name=cst.Name(module_name), asname=asname, comma=alias.comma)
        changes[node] = node.with_changes(module=_module_expr(parent), names=[new_alias])
        self.report(node, message, fix=changes, description="Import the stable `mixed_precision` module")

    def _import_from_experimental(self, node: cst.ImportFrom, base: str) -> None:
        """``from tensorflow.keras.mixed_precision.experimental import set_policy, ...``."""
        message = "`mixed_precision.experimental` was removed in TF 2.9; import the stable names"
        if isinstance(node.names, cst.ImportStar):
            self.report(node, message)
            return
        changes: dict[cst.CSTNode, cst.CSTNode] = {}
        new_names = []
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            change = table.BY_OLD.get(f"{table.EXPERIMENTAL}.{name}")
            if change is None:
                self.report(node, f"`mixed_precision.experimental.{name}` was removed in TF 2.9 and has no "
                                  "stable equivalent")
                return
            new_name = (change.target(self.context.keras) or change.old).rpartition(".")[2]
            asname = alias.asname
            if new_name != name and asname is None:
                uses = name_uses(self.context.module, name)
                if uses is None:
                    asname = cst.AsName(name=cst.Name(name))
                else:
                    changes.update({use: use.with_changes(value=new_name) for use in uses})
            new_names.append(alias.with_changes(name=cst.Name(new_name), asname=asname))
        changes[node] = node.with_changes(module=_module_expr(base.rpartition(".")[0]), names=new_names)
        self.report(node, message, fix=changes, description="Import from `mixed_precision`")

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "experimental":
            return
        resolved = self.context.resolve(node)
        if resolved is None or not resolved.startswith(table.EXPERIMENTAL + "."):
            return
        if self.context.resolve(node.value) != table.EXPERIMENTAL:
            return
        change = table.BY_OLD.get(resolved)
        if change is None:
            if node.attr.value not in _LOSS_SCALE_CLASSES:
                self.report(node, f"`mixed_precision.experimental.{node.attr.value}` was removed in TF 2.9 and "
                                  "has no stable equivalent")
            return
        new_last = (change.target(self.context.keras) or change.old).rpartition(".")[2]
        new_attr = node.attr.with_changes(value=new_last)
        if isinstance(node.value, cst.Attribute) and node.value.attr.value == "experimental":
            replacement = node.with_changes(value=node.value.value, attr=new_attr)
        elif new_last != node.attr.value:
            replacement = node.with_changes(attr=new_attr)  # the alias's import is fixed on its own
            renamed_module = self._experimental_renamed_to()
            if (renamed_module and isinstance(node.value, cst.Name) and node.value.value == "experimental"):
                replacement = replacement.with_changes(value=node.value.with_changes(value=renamed_module))
        else:
            return
        old = f"mixed_precision.experimental.{node.attr.value}"
        self.report(node, f"`{old}` was removed in TF 2.9; use `mixed_precision.{new_last}`",
                    fix={node: replacement}, description=f"Use `mixed_precision.{new_last}`")

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.resolve(node.func) not in _POLICY_NAMES:
            return
        found = find_arg(node, keyword=table.LEGACY_POLICY_KEYWORD, position=1)
        if found is None:
            return
        index, arg = found
        dynamic = string_value(arg.value) == "dynamic" or (
            isinstance(arg.value, cst.Name) and arg.value.value == "None")
        if dynamic:
            message = "`Policy(loss_scale=)` was removed; `compile` wraps the optimizer in a dynamic " \
                      "LossScaleOptimizer by itself"
            safety = FixSafety.SAFE
        else:
            message = ("`Policy(loss_scale=)` was removed; a fixed loss scale now belongs on the optimizer: "
                       "`LossScaleOptimizer(opt, ...)`")
            safety = FixSafety.UNSAFE
        self.report(arg, message, fix={node: rewrite_args(node, {index: []})}, safety=safety,
                    description="Drop `loss_scale` from `Policy`")


# ---------------------------------------------------------------------------------- MP302
_LSO_NAMES = (table.LSO, f"{table.EXPERIMENTAL}.LossScaleOptimizer")


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


class LegacyLossScaleArguments(Rule):
    code = "MP302"
    name = "legacy-loss-scale-arguments"
    message = ("`LossScaleOptimizer` argument from another Keras generation; write the form the installed "
               "Keras accepts")
    fix_safety = FixSafety.SAFE
    triggers = ("LossScaleOptimizer",)
    explanation = """
        ## What it does
        Finds `LossScaleOptimizer` calls written for another TensorFlow/Keras version:
        `loss_scale="dynamic"` / `loss_scale=N` / `loss_scale=DynamicLossScale(...)`, the
        TF ≤ 2.3 positional `LossScaleOptimizer(opt, "dynamic")`, and on Keras 3 the Keras 2
        `dynamic=False` form and a positional `dynamic` flag.

        ## Why is this bad?
        Keras 3's constructor is `(inner_optimizer, initial_scale=32768.0, dynamic_growth_steps=2000)`,
        Keras 2's is `(inner_optimizer, dynamic=True, initial_scale=None, dynamic_growth_steps=None)`.
        `loss_scale=` is a `TypeError` (Keras 2) or `ValueError` (Keras 3). A positional `"dynamic"`
        is a `TypeError` in Keras 2, and in Keras 3 it is silently taken as `initial_scale` and
        fails at the first step (string cast to float). Keras 3 refuses `dynamic=False`.

        ## Example
        ```python
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, loss_scale="dynamic")
        fixed = tf.keras.mixed_precision.LossScaleOptimizer(opt, loss_scale=1024)
        ```

        ## Use instead
        ```python
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
        # Keras 2: a fixed scale
        fixed = tf.keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False, initial_scale=1024)
        # Keras 3: no fixed scale in the LossScaleOptimizer; this starts a dynamic scale at 1024
        fixed = tf.keras.mixed_precision.LossScaleOptimizer(opt, initial_scale=1024)
        ```

        ## Fix safety
        Safe: the code it replaces cannot run on the target generation. On Keras 3 a fixed scale
        becomes a dynamic scale that starts at the same value (for a truly fixed scale, set
        `loss_scale_factor=N` on the inner optimizer and drop the LossScaleOptimizer).
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            tuned = tf.keras.mixed_precision.LossScaleOptimizer(opt, initial_scale=2**10, dynamic_growth_steps=500)
        """),
        Valid("""
            import tensorflow as tf

            fixed = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(), dynamic=False, initial_scale=128)
            also_fixed = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(), False, 128)
        """, keras=2),
        Valid("""
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(), 1024)
        """, keras=3),
        # Code importing tf_keras is Keras 2 wherever it runs.
        Valid("""
            import tf_keras

            opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(), dynamic=False, initial_scale=64)
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(), loss_scale="dynamic")
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
            """,
        ),
        # TF 2.3 positional form, aliased import.
        Invalid(
            """
            from tensorflow.keras.mixed_precision import LossScaleOptimizer as LSO

            opt = LSO(opt, "dynamic")
            """,
            """
            from tensorflow.keras.mixed_precision import LossScaleOptimizer as LSO

            opt = LSO(opt)
            """,
        ),
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(
                opt,  # the inner optimizer
                loss_scale=1024,  # fixed
            )
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(
                opt,  # the inner optimizer
                initial_scale=1024,  # fixed
            )
            """,
            keras=3,
        ),
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(
                opt,  # the inner optimizer
                loss_scale=1024,  # fixed
            )
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(
                opt,  # the inner optimizer
                dynamic=False, initial_scale=1024,  # fixed
            )
            """,
            keras=2,
        ),
        Invalid(
            """
            from tensorflow.keras import mixed_precision

            opt = mixed_precision.LossScaleOptimizer(opt, dynamic=False, initial_scale=256)
            """,
            """
            from tensorflow.keras import mixed_precision

            opt = mixed_precision.LossScaleOptimizer(opt, initial_scale=256)
            """,
            keras=3,
        ),
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, 512)
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False, initial_scale=512)
            """,
            keras=2,
        ),
        # TF 2.2-era tuned dynamic scale.
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, loss_scale=tf.mixed_precision.experimental.DynamicLossScale(initial_loss_scale=2**12, increment_period=500))
            """,
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, initial_scale=2**12, dynamic_growth_steps=500)
            """,
        ),
        # A loss scale mpfix cannot read: reported, not guessed.
        Invalid(
            """
            import tensorflow as tf

            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, loss_scale=config.loss_scale)
            """,
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        resolved = self.context.resolve(node.func)
        if resolved not in _LSO_NAMES:
            return
        keras = self.context.keras
        # The experimental LSO's second argument was ``loss_scale`` in both generations' days.
        experimental = resolved != table.LSO
        legacy = find_arg(node, keyword=table.LEGACY_LSO_KEYWORD)
        positional = find_arg(node, position=1)
        if legacy is not None:
            self._legacy_loss_scale(node, *legacy)
        elif positional is not None and string_value(positional[1].value) is not None:
            self._legacy_loss_scale(node, *positional)
        elif positional is not None and (keras == table.KERAS2 or experimental) and (
                number_value(positional[1].value) is not None):
            self._legacy_loss_scale(node, *positional)
        elif keras == table.KERAS3 and positional is not None and bool_value(positional[1].value) is not None:
            index, arg = positional
            # Dropping the Keras 2 ``dynamic`` flag moves the scale into Keras 3's ``initial_scale`` slot.
            self.report(arg, "Keras 3's `LossScaleOptimizer` has no `dynamic` argument: the second positional "
                             "argument is `initial_scale`",
                        fix={node: rewrite_args(node, {index: []})}, description="Drop the `dynamic` flag")
        elif keras == table.KERAS3:
            dynamic = find_arg(node, keyword="dynamic")
            if dynamic is not None and bool_value(dynamic[1].value) is False:
                index, arg = dynamic
                has_initial = find_arg(node, keyword="initial_scale", position=1) is not None
                message = ("Keras 3's `LossScaleOptimizer` refuses `dynamic=False`; it always scales dynamically "
                           "(for a fixed scale set `loss_scale_factor=` on the inner optimizer)")
                fix = {node: rewrite_args(node, {index: []})} if has_initial else None
                self.report(arg, message, fix=fix, description="Drop `dynamic=False`")

    def _legacy_loss_scale(self, node: cst.Call, index: int, arg: cst.Arg) -> None:
        intent = loss_scale_intent(arg.value)
        spelled = "positional `\"dynamic\"`" if arg.keyword is None else "`loss_scale=`"
        if intent is None:
            self.report(arg, f"`LossScaleOptimizer` no longer takes {spelled}; mpfix cannot read this loss scale: "
                             "use `LossScaleOptimizer(opt)` for a dynamic scale or set `initial_scale=`")
            return
        keras = self.context.keras
        message = f"`LossScaleOptimizer` no longer takes {spelled}"
        if intent.fixed is not None and keras == table.KERAS3:
            message += "; Keras 3 has no fixed scale here: it starts a dynamic scale at `initial_scale`"
        if intent.lost:
            message += f" ({intent.lost})"
        self.report(arg, message, fix={node: rewrite_args(node, {index: intent.arguments(keras)})},
                    description=f"Rewrite for Keras {keras}")
