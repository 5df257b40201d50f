"""Which Keras generation a file runs under, decided without importing TensorFlow.

Keras 2 and Keras 3 LossScaleOptimizers are not interchangeable (see
KERAS_API.md): a fix written for the wrong one is a crash or a silent
32768× update, so every fix is written for the generation found here.
"""

from __future__ import annotations

import functools
import os
import re
from importlib import metadata

KERAS2 = 2
KERAS3 = 3
DEFAULT = KERAS3  # what a fresh `pip install tensorflow` runs today

_TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tf-nightly", "tf-nightly-cpu")


def _version(dist: str) -> tuple[int, ...] | None:
    try:
        raw = metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
    parts: list[int] = []
    for piece in raw.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _legacy_keras_requested() -> bool:
    return os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")


@functools.lru_cache(maxsize=1)
def installed_generation() -> int | None:
    """The Keras generation ``import tensorflow as tf; tf.keras`` gives here, or None."""
    for dist in _TF_DISTRIBUTIONS:
        tf_version = _version(dist)
        if tf_version is None:
            continue
        if tf_version < (2, 16):
            return KERAS2
        if _legacy_keras_requested() and _version("tf-keras") is not None:
            return KERAS2
        return KERAS3
    keras_version = _version("keras")
    if keras_version is not None:
        return KERAS3 if keras_version >= (3,) else KERAS2
    return None


# A script that selects legacy Keras itself, before importing TensorFlow:
# os.environ["TF_USE_LEGACY_KERAS"] = "1" / os.environ.setdefault("TF_USE_LEGACY_KERAS", "1").
_SETS_LEGACY_KERAS = re.compile(
    r"""TF_USE_LEGACY_KERAS['"]\s*(?:\]\s*=|,)\s*['"](?:1|true|True|yes)['"]""")


def selects_legacy_keras(text: str) -> bool:
    """True if the source sets ``TF_USE_LEGACY_KERAS`` to a true value itself."""
    return "TF_USE_LEGACY_KERAS" in text and _SETS_LEGACY_KERAS.search(text) is not None


def generation_for(configured: str | int | None, keras2_file: bool) -> int:
    """Keras generation for one file.

    A file that imports ``tf_keras`` or sets ``TF_USE_LEGACY_KERAS=1`` itself
    (``keras2_file``) runs Keras 2 whatever is installed or configured;
    otherwise ``--keras``/``[tool.mpfix] keras`` win, then the installed
    packages, then today's default.
    """
    if keras2_file:
        return KERAS2
    if configured not in (None, "auto"):
        return int(configured)
    return installed_generation() or DEFAULT
