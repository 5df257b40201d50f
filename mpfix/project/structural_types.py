"""Structural parameter typing, the rule itself (issue 18, C33): which parameters what a function reads of them types
as instances of a project Keras layer/model class whose outputs follow the compute dtype.

    a parameter on which a function reads attributes, where every attribute among them that a project class
    defines is defined by a project Keras layer/model class and by no other project class, and one such class
    defines them all, is an instance of a Keras class; if every such class's outputs follow the compute dtype
    (its text never spells float32), calling it returns the compute dtype.

Only names the project defines are evidence (``self.x = ...`` in a method, a method, a class attribute, a
project base's too). The members every Keras layer has (``KERAS_MEMBERS``: ``call``, ``trainable_variables``,
``compute_dtype``...) name no class and are neutral, neither for nor against: ``tf.Module``s and optimizers share
several, and a Keras model from outside the project may have a float32 head, so they prove no float16 output.

Pure data and sets (no ``ast``, no LibCST): the per-file analysis (``codemods/analysis/param_types.py``, the class in
the same file) and the project pass (``mpfix.project.structural``) both decide with ``typed_parameters``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Bases whose subclasses are Keras layers/models (resolved spellings: ``tf.keras``/``tf_keras`` fold to ``keras``).
KERAS_CLASS_BASES = ("keras.layers.", "keras.Model", "keras.Layer", "keras.Sequential", "keras.models.Model",
                     "keras.models.Sequential", "keras.engine.base_layer.Layer", "keras.src.layers.",
                     "keras.src.models.", "keras.src.engine.base_layer.")
# Members every Keras layer/model has (overridden or inherited): reading one names no project class.
KERAS_MEMBERS = frozenset({
    "call", "build", "get_config", "from_config", "compute_output_shape", "compute_output_spec", "compute_mask",
    "add_weight", "add_loss", "add_metric", "summary", "compile", "fit", "evaluate", "predict", "predict_on_batch",
    "train_on_batch", "test_on_batch", "train_step", "test_step", "predict_step", "compute_loss", "save",
    "save_weights", "load_weights", "get_weights", "set_weights", "get_layer", "layers", "weights", "variables",
    "trainable", "trainable_weights", "trainable_variables", "non_trainable_weights", "non_trainable_variables",
    "losses", "metrics", "name", "dtype", "compute_dtype", "variable_dtype", "dtype_policy", "built", "input_spec",
    "inputs", "outputs", "input", "output", "input_shape", "output_shape", "optimizer", "loss", "stateful",
    "supports_masking", "submodules", "count_params", "reset_states", "reset_metrics",
})


@dataclass(frozen=True)
class ClassShape:
    """What one class defines, and whether it is a Keras layer/model whose outputs follow the compute dtype."""

    name: str
    defines: frozenset[str]  # attribute names it (or a project base) defines
    keras: bool  # a Keras layer/model (bases resolved)
    float16: bool  # keras, and its text never spells float32 (its outputs follow the compute dtype)


def class_index(classes: Iterable[ClassShape]) -> dict[str, list[ClassShape]]:
    """Attribute name -> the classes that define it (what ``typed_parameters`` looks names up in)."""
    index: dict[str, list[ClassShape]] = {}
    for shape in classes:
        for name in shape.defines:
            if name not in KERAS_MEMBERS and not name.startswith("__"):
                index.setdefault(name, []).append(shape)
    return index


def typed_parameters(reads: Mapping[str, frozenset[str]], index: Mapping[str, list[ClassShape]]) -> frozenset[str]:
    """The parameters that ``reads`` (parameter -> attribute names the function reads on it) makes instances of a
    float16 Keras class, ``index`` (``class_index``) holding every class that may define one of the names."""
    typed = set()
    for param, attributes in reads.items():
        evidence = {a for a in attributes if a in index}  # members of every Keras layer are not in the index
        if not evidence:
            continue
        definers = {id(c): c for a in evidence for c in index[a]}.values()
        if not all(c.keras for c in definers):
            continue  # a plain class defines one of them too: no telling which
        candidates = [c for c in definers if evidence <= c.defines]
        if candidates and all(c.float16 for c in candidates):
            typed.add(param)
    return frozenset(typed)
