"""The other names of the Keras package: one plain table (no imports), read by the rules' name resolution
(``mpfix.codemods.names.canonical``) and by the project's cross-file scan (``mpfix.project.crosscall_summary``)."""

from __future__ import annotations

# Spellings of Keras under another package's name, each folded to ``keras``.
KERAS_ALIASES = ("tensorflow.python.keras", "tensorflow.keras", "tensorflow.compat.v2.keras", "tf_keras")
# TensorFlow 1's compat copy: a class deriving from ``tf.compat.v1.keras.layers.Layer`` is a Keras layer for
# the cross-file scan; the rules keep the spelling (their tables speak of TensorFlow 2 APIs).
KERAS_V1_ALIASES = ("tensorflow.compat.v1.keras",)


def fold_keras(dotted: str) -> str:
    """``tensorflow.keras.layers.Layer`` -> ``keras.layers.Layer`` (every alias above, TF1's too);
    ``keras.src.…`` is kept: it names Keras 3's own modules."""
    for prefix in (*KERAS_ALIASES, *KERAS_V1_ALIASES):
        if dotted.startswith(prefix + "."):
            return "keras." + dotted[len(prefix) + 1:]
    return dotted
