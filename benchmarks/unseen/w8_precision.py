"""Project helper: picks the precision policy once, before any model is built."""
import os

import keras


def configure(prefer_half=True):
    """Use mixed_float16 unless MP_POLICY says otherwise; returns the policy name."""
    name = os.environ.get("MP_POLICY", "mixed_float16" if prefer_half else "float32")
    keras.mixed_precision.set_global_policy(name)
    return name
