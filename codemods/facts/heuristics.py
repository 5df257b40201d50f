"""The name-based guesses that remain, in one place, each with the case that motivated it.

Where a binding or a table (``ops``, ``keras_layers``) can decide, nothing here is used. A finding
that rests on one of these guesses alone is reported without a fix: a name is evidence, not proof.
"""

from __future__ import annotations

import re

# MP202: a capitalised constructor with ``epsilon=`` is a layer unless its name says optimizer,
# schedule, config or metric (``tf.keras.optimizers.Adam(epsilon=1e-9)``: optimizer state is float32).
NOT_A_LAYER = re.compile(r"optim|adam|rmsprop|adagrad|adadelta|adamax|nadam|ftrl|lamb|lion|sgd|lars|config|schedule|"
                         r"params|metric|loss", re.IGNORECASE)
# MP202: an imported class we cannot see is a normalisation layer using its epsilon directly only
# if its name says so (``RMSNorm(epsilon=1e-12)`` from another module of the project).
NORM_LAYER_NAME = re.compile(r"(Norm|Normalization|Normalize)$")
# MP203: a reduction whose result is assigned to (or added to) a name like ``loss`` is a loss term,
# and may stay float32 (Keras losses are float32): ``reg_loss = tf.reduce_sum(tf.square(h))``.
LOSS_NAME = re.compile(r"loss|penalt|regulari", re.IGNORECASE)
# MP204: ``exp(-d² / (2σ²))`` with ``d`` a squared distance is a Gaussian, bounded by 1
# (tf-models' heatmap losses spell the square as ``distance``/``dist``).
SQUARED_DISTANCE = re.compile(r"square|\*\*\s*2|distance|dist")


def is_constructor_name(simple: str) -> bool:
    """``Dense``, ``RMSNorm``: a class by Python's naming convention (PEP 8)."""
    return simple[:1].isupper()

# -- the dtype inference (codemods/analysis/dtype_*.py) -----------------------------------------------
# A region's `if`/`while`/`IfExp` testing a dtype guards its body (its constants are the author's
# float16-aware choice): `big = tf.float16.min if x.dtype == tf.float16 else -1e9` (MP201's VALID).
GUARD = re.compile(r"float16|half|fp16|bfloat16|\.dtype|compute_dtype|mixed")
# A word every match of GUARD (and of FLOAT16_TEST) holds (``dtype_syntax.mentions``, before the code is generated).
GUARD_WORDS = ("float16", "half", "fp16", "dtype", "mixed")
# ... and an `if` that names float16 makes the whole function dtype-aware (tf-models' attention masks).
FLOAT16_TEST = re.compile(r"float16|half|fp16")
# Training steps by name when nothing else marks them: `train_step`, `val_step`, `step_fn`.
STEP_NAME = re.compile(r"(^|_)(train|test|eval|val|predict|valid|validation)?_?step(_fn)?$|^step_fn$")
# Metric functions (keras.metrics.pearson_correlation): Keras' metric wrappers cast y_pred to float32.
METRIC_FUNCTION = re.compile(r"accuracy|correlation|metric|precision|recall|_auc$|iou_score")
# Classes whose state is float32 variables (optimizers update, regularizers penalise the policy's
# variable dtype; metrics cast to their own float32): their methods are no float16 regions.
FLOAT32_STATE_CLASS = re.compile(r"Optimizer|Regularizer|Metric|Constraint|Initializer|Schedule")
# A base class spelled like a layer (a project's `BaseBlock`, `TransformerEncoder` from another
# module) makes a class a layer when the import cannot be resolved to keras.layers.
LAYER_BASE_NAME = re.compile(r"Layer|Model|Block|Network|Encoder|Decoder|Head|Attention")
# Base classes that do not autocast (Keras' preprocessing and audio/feature layers, spelled by a
# project's own subclasses): `class LogMel(SpectrogramLayer)`.
NO_AUTOCAST_BASE = re.compile(r"Preprocessing|Preprocessor|FeatureExtractor|Tokenizer|Spectrogram|"
                              r"Rescaling|Normalization\b|Resizing|Discretization|Hashing|Lookup|Encoding")
# `super().__init__(autocast=False)` or `self._autocast = False` anywhere in `__init__`.
AUTOCAST_FALSE = re.compile(r"autocast\s*=\s*False|_autocast\s*=\s*False")
# A word every match of AUTOCAST_FALSE holds (``dtype_syntax.mentions`` looks for it before the code is generated).
AUTOCAST_WORDS = ("autocast",)
# keras.ops' own Operation classes: `call` runs on whatever the user passes, never autocast.
OPS_OPERATION_BASE = re.compile(r"(^|\.)(Operation|Function)$")
# `for v in model.trainable_variables`: float32 variables, safe to reduce.
VARIABLES_ITERABLE = re.compile(r"variables|weights")
# A call whose callee's last name says model/encoder/decoder returns the compute dtype
# (`logits = self.bert_encoder(x)` in a training step).
MODEL_CALL_NAME = re.compile(r"model|encoder|decoder", re.IGNORECASE)
# Parameters that are Python numbers by name: `training`, `num_heads`, `n_layers`.
PYTHON_PARAMETER = re.compile(r"training|^num_|^n_")
# Sizes and counts are ≥ 0 (MP204's `exp(-log(10000.0) * i / d_model)` positional encodings).
SIZE_NAME = re.compile(r"^(n|d|dim|depth|size|length|len|width|height|channels|units|hidden|d_model|i|j|k|"
                       r"step|pos|position|index|idx|max_\w+|num_\w+|n_\w+|\w+_(dim|size|len|length|depth|units))$")
# `tape.gradient(...)`: a receiver named like a tape gives the float32 gradients of float32 variables.
TAPE_NAME = re.compile(r"tape", re.IGNORECASE)
# `self.optimizer.scale_loss(loss)`, `opt.apply_gradients(...)`: a receiver named like an optimizer
# (C27: only then are `scale_loss`/`apply_gradients` Keras optimizer methods).
OPTIMIZER_NAME = re.compile(r"optim|opt$|^opt", re.IGNORECASE)
# tf_keras layers keep their `backend.RandomGenerator` as `self._random_generator` (base layer): its `dropout(x)` is
# x's dtype. A method named `dropout` of anything else is usually a Dropout layer attribute (`self.dropout(x)`).
RANDOM_GENERATOR = re.compile(r"(^|\.)_?random_generator$")
