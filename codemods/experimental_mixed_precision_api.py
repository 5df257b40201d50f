"""MP301: `tf.keras.mixed_precision.experimental`, removed in TF 2.9, and `Policy(loss_scale=)`.

Scripts written for TF 2.1–2.8 crash on today's TensorFlow before they train: the
``experimental`` namespace is gone and ``Policy`` lost its ``loss_scale`` argument.
Renames come from ``_api_table``.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import find_all

from mpfix.codemods import _api_table as table
from mpfix.codemods.base import Fact, Invalid, Need, Valid
from mpfix.codemods._mp_api_support import (
    ApiDriftRule,
    attribute_uses,
    find_arg,
    name_uses,
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


class ExperimentalMixedPrecisionApi(ApiDriftRule):
    code = "MP301"
    fix_needs_tf = table.STABLE_SINCE
    name = "experimental-mixed-precision-api"
    uses = frozenset({Fact.VERSION_GUARDS, Fact.DECLARED_TF})
    needs = frozenset({Need.MIXED_PRECISION_API})  # the mixed_precision module spelled (the parse gate)
    message = ("`mixed_precision.experimental` was removed in TF 2.9; use the stable "
               "`tf.keras.mixed_precision` names")
    messages = {
        "import_module": "`mixed_precision.experimental` was removed in TF 2.9; import `mixed_precision`",
        "import_from_module": ("`mixed_precision.experimental` was removed in TF 2.9; "
                               "`from tensorflow.keras import mixed_precision` instead"),
        "import_names": "`mixed_precision.experimental` was removed in TF 2.9; import the stable names",
        "no_equivalent": "`mixed_precision.experimental.{name}` was removed in TF 2.9 and has no stable equivalent",
        "renamed": "`mixed_precision.experimental.{name}` was removed in TF 2.9; use `mixed_precision.{new_name}`",
        "policy_dynamic_scale": ("`Policy(loss_scale=)` was removed; `compile` wraps the optimizer in a dynamic "
                                 "LossScaleOptimizer by itself"),
        "policy_fixed_scale": ("`Policy(loss_scale=)` was removed; a fixed loss scale now belongs on the optimizer: "
                               "`LossScaleOptimizer(opt, ...)`"),
    }
    notes = {"not_split": "mpfix does not split this import"}
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
        # An experimental name with no stable equivalent: no fix.
        Invalid(
            """
            import tensorflow as tf

            scale = tf.keras.mixed_precision.experimental.get_layer_policy(layer)
            """,
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
            self.report(node, "import_module", fix={node: node.with_changes(names=names)},
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
        if len(node.names) != 1:
            self.report(node, "import_from_module", note="not_split")
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
        self.report(node, "import_from_module", fix=changes, description="Import the stable `mixed_precision` module")

    def _import_from_experimental(self, node: cst.ImportFrom, base: str) -> None:
        """``from tensorflow.keras.mixed_precision.experimental import set_policy, ...``."""
        if isinstance(node.names, cst.ImportStar):
            self.report(node, "import_names")
            return
        changes: dict[cst.CSTNode, cst.CSTNode] = {}
        new_names = []
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            change = table.BY_OLD.get(f"{table.EXPERIMENTAL}.{name}")
            if change is None:
                self.report(node, "no_equivalent", name=name)
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
        self.report(node, "import_names", fix=changes, description="Import from `mixed_precision`")

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
                self.report(node, "no_equivalent", name=node.attr.value)
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
        self.report(node, "renamed", name=node.attr.value, new_name=new_last,
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
            variant, safety = "policy_dynamic_scale", FixSafety.SAFE
        else:
            variant, safety = "policy_fixed_scale", FixSafety.UNSAFE
        self.report(arg, variant, fix={node: rewrite_args(node, {index: []})}, safety=safety,
                    description="Drop `loss_scale` from `Policy`")
