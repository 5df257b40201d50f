"""MP307: the deprecated `tf.config.experimental_run_functions_eagerly` switch.

Renamed `tf.config.run_functions_eagerly` in TF 2.3; the fix is a pure rename (same function).
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._mp_api_support import ApiDriftRule
from mpfix.codemods.base import Fact, Invalid, Valid
from mpfix.findings import FixSafety

# Deprecated tf.config function → its stable name.
_EAGER_RENAMES = {
    "experimental_run_functions_eagerly": "run_functions_eagerly",
    "experimental_functions_run_eagerly": "functions_run_eagerly",
}


class ExperimentalRunFunctionsEagerly(ApiDriftRule):
    code = "MP307"
    name = "run-functions-eagerly"
    uses = frozenset({Fact.VERSION_GUARDS})
    message = "Deprecated `tf.config.experimental_*` eager switch; use `tf.config.run_functions_eagerly`"
    messages = {"renamed": "`tf.config.{old}` is deprecated; use `tf.config.{new}`"}
    fix_safety = FixSafety.SAFE
    triggers = tuple(_EAGER_RENAMES)
    explanation = """
        ## What it does
        Finds `tf.config.experimental_run_functions_eagerly(...)` and
        `tf.config.experimental_functions_run_eagerly()`.

        ## Why is this bad?
        They became `tf.config.run_functions_eagerly` / `functions_run_eagerly` in TF 2.3 and
        are deprecated. Debugging a NaN by running `tf.function`s eagerly is common in
        mixed-precision work, so the old spelling is copied around.

        ## Example
        ```python
        tf.config.experimental_run_functions_eagerly(True)
        ```

        ## Use instead
        ```python
        tf.config.run_functions_eagerly(True)
        ```

        ## Fix safety
        Safe: the stable function is the same function.
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            tf.config.run_functions_eagerly(True)
            assert tf.config.functions_run_eagerly()
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            tf.config.experimental_run_functions_eagerly(True)
            """,
            """
            import tensorflow as tf

            tf.config.run_functions_eagerly(True)
            """,
        ),
        Invalid(
            """
            import tensorflow.compat.v2 as tf2

            if not tf2.config.experimental_functions_run_eagerly():
                tf2.config.experimental_run_functions_eagerly(True)
            """,
            """
            import tensorflow.compat.v2 as tf2

            if not tf2.config.functions_run_eagerly():
                tf2.config.run_functions_eagerly(True)
            """,
            count=2,
        ),
    ]

    def visit_Attribute(self, node: cst.Attribute) -> None:
        old = node.attr.value
        if old not in _EAGER_RENAMES:
            return
        resolved = self.context.resolve(node)
        if resolved not in (f"tensorflow.config.{old}", f"tensorflow.compat.v1.config.{old}"):
            return
        new = _EAGER_RENAMES[old]
        self.report(
            node,
            "renamed",
            old=old,
            new=new,
            fix={node.attr: node.attr.with_changes(value=new)},
            description=f"Rename to `tf.config.{new}`",
        )
