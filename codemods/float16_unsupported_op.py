"""MP208: a TensorFlow op with no float16 kernel (eigh, cholesky, svd, det, solve, ...) given a float16 tensor."""

from __future__ import annotations

import re

import libcst as cst

from mpfix.codemods._float16_scope import argument
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.base import Fact, Invalid, Need, Rule, Valid
from mpfix.codemods.facts import ops as op_table
from mpfix.codemods.facts.dtype_facts import dtype_facts
from mpfix.findings import FixSafety


class Float16UnsupportedOp(Rule):
    code = "MP208"
    name = "float16-unsupported-op"
    uses = frozenset({Fact.DTYPES})
    message = "TensorFlow has no float16 kernel for this op; a float16 input fails at run time: compute it in float32"
    messages = {
        "no_kernel": ("`{op}` in float16 fails: TensorFlow has no float16 kernel for it (NotFoundError eagerly; in a "
                      "graph InvalidArgumentError 'No OpKernel was registered', for range ValueError 'Unsupported "
                      "dtype', for the FFTs ValueError 'RFFT requires tf.float32 or tf.float64 inputs'); compute it "
                      "in float32 and cast what it returns back where it meets float16 tensors"),
    }
    fix_safety = FixSafety.NONE  # report only: where to compute in float32 is the author's choice
    requires_float16 = True
    needs = frozenset({Need.FLOAT16_REGION})  # reports only in a float16 dtype region (the parse gate)
    # The ops the table lists without a float16 kernel, called as attributes (`tf.linalg.eigh(`).
    triggers = (re.compile(r"\.(?:" + "|".join(sorted(op_table.without_float16_kernel(), key=lambda n: (-len(n), n)))
                           + r")\s*\("),)
    explanation = """
        ## What it does
        Finds TensorFlow linear-algebra ops that have no float16 kernel (`tf.linalg.eigh`,
        `eigvalsh`, `cholesky`, `svd`, `det`, `slogdet`, `logdet`, `solve`, `triangular_solve`,
        `lstsq`, `expm`, `pinv`, `cholesky_solve`) called on a tensor that is float16 under
        `mixed_float16`: a whitening layer's covariance, a Gaussian layer's kernel matrix. Also
        `tf.range` made in float16 (`dtype=x.dtype`): it has no float16 kernel in a graph. And the
        real-input FFTs and what is built on them (`tf.signal.stft`, `rfft`, `rfft2d`, `dct`,
        `idct`, `mfccs_from_log_mel_spectrograms`; `keras.ops.stft`/`rfft`): a spectrogram layer
        left float16 under the policy gets the autocast float16 waveform.

        ## Why is this bad?
        TensorFlow registers these ops for float32/float64 (and complex) only. With a float16
        input the first step fails: `NotFoundError` eagerly, `InvalidArgumentError: No OpKernel
        was registered to support Op 'SelfAdjointEigV2' ... T=DT_HALF` in a `tf.function` or
        `fit`; the FFTs raise `ValueError: RFFT requires tf.float32 or tf.float64 inputs` when
        the model is built. The float32 run never sees it.

        ## Example
        ```python
        class Whitening(keras.layers.Layer):
            def call(self, x):
                cov = tf.matmul(x, x, transpose_a=True)
                eigvals, eigvecs = tf.linalg.eigh(cov)  # x is float16
        ```

        ## Use instead
        ```python
        class Whitening(keras.layers.Layer):
            def call(self, x):
                x32 = tf.cast(x, tf.float32)
                cov = tf.matmul(x32, x32, transpose_a=True)
                eigvals, eigvecs = tf.linalg.eigh(cov)
        ```
        or build the layer with `dtype="float32"`.

        ## Fix safety
        No fix: where the float32 island ends (what is cast back to the compute dtype) is the
        author's choice.
    """
    VALID = [
        # The layer computes in float32 (its dtype), so its inputs are autocast to float32.
        Valid("""
            import tensorflow as tf
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")

            class Whitening(keras.layers.Layer):
                def call(self, x):
                    x = tf.cast(x, tf.float32)
                    eigvals, eigvecs = tf.linalg.eigh(tf.matmul(x, x, transpose_a=True))
                    return x @ eigvecs
        """),
        # qr has a float16 kernel.
        Valid("""
            import tensorflow as tf
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")

            class Orthogonal(keras.layers.Layer):
                def call(self, x):
                    q, r = tf.linalg.qr(x)
                    return q
        """),
    ]
    INVALID = [
        Invalid("""
            import tensorflow as tf
            import keras
            keras.mixed_precision.set_global_policy("mixed_float16")

            class Whitening(keras.layers.Layer):
                def call(self, x):
                    cov = tf.matmul(x, x, transpose_a=True)
                    eigvals, eigvecs = tf.linalg.eigh(cov)
                    return x @ eigvecs
        """),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        plain = dtype_facts(self.context)
        facts = plain.assuming(Dtype.FLOAT16)
        for call in facts.nodes(cst.Call):
            resolved = self.context.resolve(call.func)
            spec = op_table.known(resolved)
            if spec is None or spec.float16_kernel or not op_table.float16_fails_in(resolved):
                continue
            if spec.creates_float32:
                # A creator (range) fails only when its dtype argument names float16 (`dtype=x.dtype`, x float16).
                # Only a spelling that names its dtype (`tf.float16`, `x.dtype`, `self.compute_dtype`): a variable
                # holding one of several dtypes (`tf.float32 if training else tf.int32`) is no certain float16.
                dtype_arg = argument(call, "dtype", spec.dtype_position)
                named = dtype_arg is not None and (isinstance(dtype_arg.value, cst.Attribute) or
                                                   isinstance(dtype_arg.value, cst.SimpleString))
                if named and plain.dtype_of_spelling(dtype_arg.value, call) is Dtype.FLOAT16:
                    self.report(call, "no_kernel", op=self.context.code(call.func))
                continue
            operands = [a.value for a in call.args if not a.star and a.keyword is None][:2]
            # Its input is float16 (eigh of a float16 matrix).
            if any(facts.dtype_of(value) is Dtype.FLOAT16 for value in operands):
                self.report(call, "no_kernel", op=self.context.code(call.func))
