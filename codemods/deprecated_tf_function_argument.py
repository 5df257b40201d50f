"""MP306: deprecated `tf.function` arguments (`experimental_relax_shapes`, `experimental_compile`).

They still run on TF 2.21 but warn, and tutorials from the TF 2.1–2.4 era that introduced
mixed precision use them throughout. The fix is a pure rename with identical semantics.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._mp_api_support import ApiDriftRule
from mpfix.codemods.base import Fact, Invalid, Valid
from mpfix.findings import FixSafety

# Deprecated keyword of tf.function → its replacement (same meaning) and the TensorFlow that added it.
_TF_FUNCTION_RENAMES = {
    "experimental_relax_shapes": ("reduce_retracing", (2, 9)),
    "experimental_compile": ("jit_compile", (2, 5)),
}


class DeprecatedTfFunctionArgument(ApiDriftRule):
    code = "MP306"
    name = "relax-shapes"
    uses = frozenset({Fact.VERSION_GUARDS})
    message = "Deprecated `tf.function` argument; use `reduce_retracing=`/`jit_compile=`"
    messages = {"renamed": "`tf.function({old}=...)` is deprecated; use `{new}=...`"}
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

        A project that declares it runs an older TensorFlow (requirements such as
        `tensorflow<2.9`, or a Dockerfile's base image: NGC `nvcr.io/nvidia/tensorflow:22.05-tf2-py3`
        and older ship TF <= 2.8) is not told: there the old name is the current one, the new
        name does not exist yet (`reduce_retracing` appeared in TF 2.9, `jit_compile` in TF 2.5),
        and the fix would raise `TypeError`.
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
                new, since = _TF_FUNCTION_RENAMES[old]
                if self.context.tf_max is not None and self.context.tf_max < since:
                    continue  # the declared TensorFlow predates the new name: the old one is current there
                self.report(
                    arg,
                    "renamed",
                    old=old,
                    new=new,
                    fix={arg.keyword: arg.keyword.with_changes(value=new)},
                    description=f"Rename `{old}` to `{new}`",
                )
