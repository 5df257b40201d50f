"""The one table of ops whose result dtype is not their inputs': creators, casts, shapes, comparisons.

Every spelling counts alike: ``tf.random.normal``, ``tf.math.linspace``, ``keras.ops.arange``,
``ops.linspace`` (``from keras import ops``), ``keras.random.normal``. Names here are the op's
path after its namespace (``tensorflow.``, ``tensorflow.math.``, ``keras.ops.``, ``keras.ops.numpy.``,
``keras.random.``, ``keras.backend.``). The dtype inference (``analysis.dtypes``) reads the table,
and MP206's prefilter triggers are generated from it, so the two cannot disagree.
"""

from __future__ import annotations

import re

# Creators: float32 unless given a dtype (Keras 3's ops use floatx(), float32 under every
# mixed policy). "value" creators take their dtype from a value argument when it is a tensor.
FLOAT_CREATORS = {
    "ones": None, "zeros": None, "eye": None, "identity_matrix": None, "linspace": None,
    "logspace": None, "random.normal": None, "random.uniform": None, "random.truncated_normal": None,
    "random.stateless_normal": None, "random.stateless_uniform": None, "random.gamma": None,
    "random.beta": None, "random.dropout": None, "full": None, "tri": None, "hanning": None,
    "hamming": None, "blackman": None, "bartlett": None, "kaiser": None, "empty": None,
    "fill": "value", "constant": "value", "convert_to_tensor": "value", "array": "value",
    "asarray": "value",
}
# Integer unless given a dtype or float bounds.
RANGE_OPS = {"range", "arange"}
# Integer results whatever their input.
INT_OPS = {"shape", "size", "rank", "argmax", "argmin", "argsort", "one_hot_indices", "count_nonzero",
           "searchsorted", "unique", "where_indices", "nonzero", "digitize", "bincount", "ndim", "top_k_indices"}
# Boolean results.
BOOL_OPS = {"equal", "not_equal", "greater", "less", "greater_equal", "less_equal", "logical_and",
            "logical_or", "logical_not", "logical_xor", "isnan", "isinf", "isfinite", "is_nan", "is_inf",
            "is_finite", "sequence_mask", "in_top_k", "isclose", "all", "any", "reduce_all", "reduce_any"}
# The dtype of their first argument unless given one.
LIKE_OPS = {"ones_like", "zeros_like", "full_like", "fill_like", "identity", "stop_gradient",
            "random.normal_like"}
# Casts: dtype is their second argument.
CAST_OPS = {"cast", "saturate_cast", "dtypes.cast", "image.convert_image_dtype"}
# Complex results from real inputs.
COMPLEX_OPS = {"complex", "signal.fft", "signal.rfft", "signal.stft", "fft", "rfft", "stft", "signal.fft2d",
               "fft2", "rfft2"}
# Real results from complex inputs.
REAL_OPS = {"real", "imag", "abs_complex", "angle", "signal.irfft", "irfft", "istft", "signal.inverse_stft"}

NAMESPACES = ("tensorflow.math.", "tensorflow.", "keras.ops.numpy.", "keras.ops.nn.", "keras.ops.", "keras.random.",
              "keras.backend.", "keras.src.ops.")
# keras.random.normal is spelled `random.normal` in the table (as tf.random.normal is).
_KERAS_RANDOM = "keras.random."


def op_name(resolved: str | None) -> str | None:
    """``tensorflow.math.reduce_sum`` → ``reduce_sum``; ``keras.random.normal`` → ``random.normal``; else None."""
    if not resolved:
        return None
    if resolved.startswith("tensorflow.compat.v1.") or resolved.startswith("tensorflow.compat.v2."):
        resolved = "tensorflow." + resolved[len("tensorflow.compat.v1."):]
    if resolved.startswith(_KERAS_RANDOM):
        return "random." + resolved[len(_KERAS_RANDOM):]
    for prefix in NAMESPACES:
        if resolved.startswith(prefix):
            return resolved[len(prefix):]
    return None


def _trigger_words() -> list[str]:
    names = set(FLOAT_CREATORS) | RANGE_OPS | CAST_OPS
    return sorted({name.split(".")[-1] for name in names}, key=lambda n: (-len(n), n))


# The prefilter of rules about float32 values: a float32 spelling, or a call of any creator.
FLOAT32_TRIGGERS = ("float32", "float64", "floatx", re.compile(
    r"\.(?:" + "|".join(re.escape(w) for w in _trigger_words()) + r")\s*\("))
