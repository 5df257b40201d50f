"""API drift, part 3: the TF1-era automatic mixed-precision graph rewrite (MP305).

``enable_mixed_precision_graph_rewrite`` and grappler's ``auto_mixed_precision``
cast ops to float16 behind Keras' back. In TF 2 the function only survives under
``tf.compat.v1``; it switches the rewrite on globally even when its return value
(the loss-scaled optimizer) is thrown away. The Keras replacement is a
``mixed_float16`` policy, set before the model is built, plus a
``LossScaleOptimizer``.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import find_all

from mpfix.codemods import _api_table as table
from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.codemods.mixed_precision_api import Intent, loss_scale_intent
from mpfix.codemods._mp_api_support import (
    find_arg,
    mixed_precision_spelling,
    optimizer_names,
    rewrite_args,
    string_value,
)
from mpfix.codemods.names import dotted_name
from mpfix.findings import FixSafety
from mpfix.policy import Policy

_REWRITES = {c.old for c in table.API_CHANGES if c.kind == "rewrite" and c.old_last == table.GRAPH_REWRITE_FUNCTION}
_GRAPPLER = {"tensorflow.config.optimizer.set_experimental_options",
             "tensorflow.compat.v1.config.optimizer.set_experimental_options"}
_ENV_VARIABLE = "TF_ENABLE_AUTO_MIXED_PRECISION"


def _bound_names(stmt: cst.BaseStatement) -> set[str]:
    """Names a top-level import statement binds."""
    names: set[str] = set()
    if not isinstance(stmt, cst.SimpleStatementLine):
        return names
    for small in stmt.body:
        if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
            for alias in small.names:
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    names.add(alias.asname.name.value)
                else:
                    names.add((dotted_name(alias.name) or "").split(".")[0])
    return names


def _is_import(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


class GraphRewrite(Rule):
    code = "MP305"
    name = "graph-rewrite"
    message = ("The mixed-precision graph rewrite is TF1 API; set a `mixed_float16` policy and use a "
               "`LossScaleOptimizer`")
    fix_safety = FixSafety.UNSAFE
    triggers = (table.GRAPH_REWRITE_FUNCTION, table.GRAPPLER_OPTION, _ENV_VARIABLE)
    explanation = """
        ## What it does
        Finds `tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)`, its
        `tf.compat.v1` spellings, grappler's `auto_mixed_precision` in
        `tf.config.optimizer.set_experimental_options`, and the
        `TF_ENABLE_AUTO_MIXED_PRECISION` environment variable; also when the function's return
        value is unused.

        ## Why is this bad?
        `tf.train.experimental.enable_mixed_precision_graph_rewrite` no longer exists in TF 2
        (`AttributeError`); the `tf.compat.v1` one still switches a global grappler rewrite on,
        even when the loss-scaled optimizer it returns is dropped — then float16 gradients
        underflow with no loss scaling at all. The rewrite does not know about Keras dtype
        policies, so layers that must stay float32 (a softmax output) are cast anyway.

        ## Example
        ```python
        opt = tf.keras.optimizers.SGD()
        opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)
        ```

        ## Use instead
        ```python
        tf.keras.mixed_precision.set_global_policy("mixed_float16")  # before building the model
        opt = tf.keras.optimizers.SGD()
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
        ```

        ## Fix safety
        Unsafe: the policy makes Keras layers compute in float16 where the rewrite chose ops by
        an allow-list, so numerics change. mpfix puts the policy right after the imports (it must
        precede the model's construction; where the module has no top-level import of
        TensorFlow it goes just before the old call). Custom training loops then need
        `scale_loss` (Keras 3) or `get_scaled_loss`/`get_unscaled_gradients` (Keras 2): see MP102.
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            tf.keras.mixed_precision.set_global_policy("mixed_float16")
            tf.config.optimizer.set_experimental_options({"auto_mixed_precision": False, "layout_optimizer": True})
        """),
        # A user's own function of the same name.
        Valid("""
            def enable_mixed_precision_graph_rewrite(opt):
                return opt

            opt = enable_mixed_precision_graph_rewrite(make_optimizer())
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            model = build_model()
            opt = tf.keras.optimizers.SGD(0.1)
            opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)
            """,
            """
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            model = build_model()
            opt = tf.keras.optimizers.SGD(0.1)
            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
            """,
        ),
        # Return value unused: the rewrite was on, the loss scaling was not.
        Invalid(
            """
            import tensorflow.compat.v1 as tf1
            from tensorflow import keras

            optimizer = keras.optimizers.Adam()
            tf1.mixed_precision.enable_mixed_precision_graph_rewrite(optimizer, loss_scale=1024)
            """,
            """
            import tensorflow.compat.v1 as tf1
            from tensorflow import keras
            keras.mixed_precision.set_global_policy("mixed_float16")

            optimizer = keras.optimizers.Adam()
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer, initial_scale=1024)
            """,
            keras=3,
        ),
        Invalid(
            """
            import tensorflow.compat.v1 as tf1
            from tensorflow import keras

            optimizer = keras.optimizers.Adam()
            tf1.mixed_precision.enable_mixed_precision_graph_rewrite(optimizer, loss_scale=1024)
            """,
            """
            import tensorflow.compat.v1 as tf1
            from tensorflow import keras
            keras.mixed_precision.set_global_policy("mixed_float16")

            optimizer = keras.optimizers.Adam()
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer, dynamic=False, initial_scale=1024)
            """,
            keras=2,
        ),
        Invalid(
            """
            import tensorflow as tf

            tf.config.optimizer.set_experimental_options({
                "auto_mixed_precision": True,
                "layout_optimizer": True,  # keep
            })
            model.compile(optimizer=tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite(
                tf.keras.optimizers.Adam()))
            """,
            """
            import tensorflow as tf
            tf.keras.mixed_precision.set_global_policy("mixed_float16")

            tf.config.optimizer.set_experimental_options({
                "layout_optimizer": True,  # keep
            })
            model.compile(optimizer=tf.keras.mixed_precision.LossScaleOptimizer(
                tf.keras.optimizers.Adam()))
            """,
            count=2,
        ),
        # Imports only inside the function: the policy goes where the rewrite was.
        Invalid(
            """
            def main():
                import tensorflow as tf
                tf.config.optimizer.set_experimental_options({"auto_mixed_precision": True})
                train()
            """,
            """
            def main():
                import tensorflow as tf
                tf.keras.mixed_precision.set_global_policy("mixed_float16")
                train()
            """,
        ),
        Invalid(
            """
            import os
            os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"
            """,
        ),
    ]

    def __init__(self, context) -> None:
        super().__init__(context)
        self._statement: cst.SimpleStatementLine | None = None

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._statement = node

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self._statement = None

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if string_value(node) == _ENV_VARIABLE:
            self.report(node, f"`{_ENV_VARIABLE}` turns on the grappler float16 rewrite behind Keras' back; "
                              "remove it and set a `mixed_float16` policy")

    def visit_Call(self, node: cst.Call) -> None:
        resolved = self.context.resolve(node.func)
        if resolved in _REWRITES:
            self._graph_rewrite(node)
        elif resolved in _GRAPPLER:
            self._grappler(node)

    # -- the two forms ----------------------------------------------------------------------
    def _graph_rewrite(self, node: cst.Call) -> None:
        message = ("`enable_mixed_precision_graph_rewrite` is TF1 API (gone from `tf.train` in TF 2); use a "
                   "`mixed_float16` policy and a `LossScaleOptimizer`")
        statement = self._statement
        optimizer = find_arg(node, keyword="opt", position=0)
        loss_scale = find_arg(node, keyword="loss_scale", position=1)
        if loss_scale is not None:
            intent = loss_scale_intent(loss_scale[1].value)
        elif self.context.loss_scale is not None:
            intent = Intent(fixed=cst.Float(repr(float(self.context.loss_scale))))
        else:
            intent = Intent()
        if statement is None or optimizer is None or intent is None:
            self.report(node, message)
            return
        spelling, imports = mixed_precision_spelling(self.context)
        extra = intent.arguments(self.context.keras)
        bare = optimizer[1].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
        plan = {optimizer[0]: [bare] if loss_scale is not None else [bare, *extra]}
        if loss_scale is not None:
            plan[loss_scale[0]] = extra
        lso = rewrite_args(node, plan).with_changes(func=cst.parse_expression(f"{spelling}.LossScaleOptimizer"))
        unused = (len(statement.body) == 1 and isinstance(statement.body[0], cst.Expr)
                  and statement.body[0].value is node)
        if unused:
            message += " (its return value, the loss-scaled optimizer, is unused)"
            target = optimizer[1].value
            wrapped = optimizer_names(self.context.module, self.context, lso_only=True)
            if dotted_name(target) is not None and dotted_name(target) not in wrapped:
                new = [statement.with_changes(body=[cst.Assign(targets=[cst.AssignTarget(target)], value=lso)])]
            else:
                new = []
        else:
            new = [statement.deep_replace(node, lso)]
        self._report_with_policy(node, statement, new, message, spelling, imports,
                                 "Replace the graph rewrite with a policy and a LossScaleOptimizer")

    def _grappler(self, node: cst.Call) -> None:
        found = find_arg(node, keyword="options", position=0)
        if found is None or not isinstance(found[1].value, cst.Dict):
            return
        options = found[1].value
        entries = [e for e in options.elements if isinstance(e, cst.DictElement)
                   and string_value(e.key) == table.GRAPPLER_OPTION]
        if not entries or (isinstance(entries[0].value, cst.Name) and entries[0].value.value == "False"):
            return
        message = ("grappler's `auto_mixed_precision` casts ops to float16 without loss scaling and behind "
                   "Keras' back; set a `mixed_float16` policy instead")
        statement = self._statement
        if statement is None or len(statement.body) != 1 or not isinstance(statement.body[0], cst.Expr) or (
                statement.body[0].value is not node):
            self.report(entries[0], message)
            return
        rest = [e for e in options.elements if e not in entries]
        if rest:
            if options.elements[-1] in entries:
                rest[-1] = rest[-1].with_changes(comma=options.elements[-1].comma)
            new = [statement.deep_replace(options, options.with_changes(elements=rest))]
        else:
            new = []
        spelling, imports = mixed_precision_spelling(self.context)
        self._report_with_policy(entries[0], statement, new, message, spelling, imports,
                                 "Replace grappler's rewrite with a mixed_float16 policy")

    # -- where the policy goes -------------------------------------------------------------------
    def _report_with_policy(self, node: cst.CSTNode, statement: cst.SimpleStatementLine,
                            new: list[cst.BaseStatement], message: str, spelling: str,
                            imports: tuple[str, ...], description: str) -> None:
        changes: dict[cst.CSTNode, object] = {}
        if self.context.module_policy is not Policy.FLOAT16:
            policy = cst.parse_statement(f'{spelling}.set_global_policy("mixed_float16")',
                                         config=self.context.module.config_for_parsing)
            anchor = None if imports else self._anchor(statement, spelling.split(".")[0])
            if anchor is not None:
                changes[anchor] = cst.FlattenSentinel([anchor, policy])
            else:
                new = [policy.with_changes(leading_lines=statement.leading_lines),
                       *[s.with_changes(leading_lines=()) for s in new]]
        if not new:
            changes[statement] = cst.RemoveFromParent()
        elif len(new) == 1:
            changes[statement] = new[0]
        else:
            changes[statement] = cst.FlattenSentinel(new)
        self.report(node, message, fix=changes, description=description, imports=imports)

    def _anchor(self, statement: cst.SimpleStatementLine, head: str) -> cst.SimpleStatementLine | None:
        """The last top-level import before ``statement`` once ``head`` is bound at top level."""
        body = self.context.module.body
        end = len(body)
        for index, top in enumerate(body):
            if top is statement or any(s is statement for s in find_all(top, cst.SimpleStatementLine)):
                end = index
                break
        anchor = None
        bound = False
        for top in body[:end]:
            if _is_import(top):
                bound = bound or head in _bound_names(top)
                if bound:
                    anchor = top
        return anchor if isinstance(anchor, cst.SimpleStatementLine) else None
