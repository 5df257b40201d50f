"""Deprecated TensorFlow APIs around ``tf.function`` that mixed-precision scripts carry along.

These still run on TF 2.21 but warn, and tutorials from the TF 2.1–2.4 era
that introduced mixed precision use them throughout. Both fixes are pure
renames with identical semantics, so they are safe.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.base import Invalid, Rule, Valid
from mpfix.findings import FixSafety

# Deprecated keyword of tf.function → its replacement (same meaning).
_TF_FUNCTION_RENAMES = {
    "experimental_relax_shapes": "reduce_retracing",
    "experimental_compile": "jit_compile",
}


class DeprecatedTfFunctionArgument(Rule):
    code = "MP306"
    name = "relax-shapes"
    message = "Deprecated `tf.function` argument; use `reduce_retracing=`/`jit_compile=`"
    fix_safety = FixSafety.SAFE
    triggers = tuple(_TF_FUNCTION_RENAMES)
    explanation = """
        ## What it does
        Finds `tf.function` called or used as a decorator with `experimental_relax_shapes=`
        or `experimental_compile=`.

        ## Why is this bad?
        Both arguments were renamed in TF 2.5/2.9 (`reduce_retracing`, `jit_compile`). The old
        names still work but log a deprecation warning on every trace and will be removed;
        scripts copied from the TF 2.4-era mixed-precision guide carry them.

        ## Example
        ```python
        @tf.function(experimental_relax_shapes=True)
        def train_step(x, y): ...
        ```

        ## Use instead
        ```python
        @tf.function(reduce_retracing=True)
        def train_step(x, y): ...
        ```

        ## Fix safety
        Safe: the new argument has the same meaning.
    """
    VALID = [
        Valid("""
            import tensorflow as tf

            @tf.function(reduce_retracing=True, jit_compile=True)
            def step(x):
                return x
        """),
        # Not TensorFlow's tf.function: a user's own helper with the same keyword.
        Valid("""
            def function(f=None, experimental_relax_shapes=False):
                return f

            step = function(lambda x: x, experimental_relax_shapes=True)
        """),
    ]
    INVALID = [
        Invalid(
            """
            import tensorflow as tf

            @tf.function(experimental_relax_shapes=True)
            def train_step(x):
                return x * 2
            """,
            """
            import tensorflow as tf

            @tf.function(reduce_retracing=True)
            def train_step(x):
                return x * 2
            """,
        ),
        Invalid(
            """
            from tensorflow import function as tf_function

            step = tf_function(
                lambda x: x,
                experimental_relax_shapes=True,  # keep shapes loose
                experimental_compile=False,
            )
            """,
            """
            from tensorflow import function as tf_function

            step = tf_function(
                lambda x: x,
                reduce_retracing=True,  # keep shapes loose
                jit_compile=False,
            )
            """,
            count=2,
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.resolve(node.func) != "tensorflow.function":
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in _TF_FUNCTION_RENAMES:
                old = arg.keyword.value
                new = _TF_FUNCTION_RENAMES[old]
                self.report(
                    arg,
                    f"`tf.function({old}=...)` is deprecated; use `{new}=...`",
                    fix={arg.keyword: arg.keyword.with_changes(value=new)},
                    description=f"Rename `{old}` to `{new}`",
                )


# Deprecated tf.config function → its stable name.
_EAGER_RENAMES = {
    "experimental_run_functions_eagerly": "run_functions_eagerly",
    "experimental_functions_run_eagerly": "functions_run_eagerly",
}


class ExperimentalRunFunctionsEagerly(Rule):
    code = "MP307"
    name = "run-functions-eagerly"
    message = "Deprecated `tf.config.experimental_*` eager switch; use `tf.config.run_functions_eagerly`"
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
            f"`tf.config.{old}` is deprecated; use `tf.config.{new}`",
            fix={node.attr: node.attr.with_changes(value=new)},
            description=f"Rename to `tf.config.{new}`",
        )
