"""Experiment settings for the review-classifier runs. Importing this module configures Keras."""
import os

import keras

HPARAMS = {
    "vocab": 2000,
    "seq_len": 48,
    "dim": 64,
    "heads": 4,
    "batch": 32,
    "lr": 1e-3,
    "epochs": 3,
}

# Mixed precision everywhere unless a run opts out (MP_PRECISION=float32 for the baseline).
PRECISION = os.environ.get("MP_PRECISION", "mixed_float16")
keras.mixed_precision.set_global_policy(PRECISION)
