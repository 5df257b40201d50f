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
