"""Which Keras generation a file runs under, decided without importing TensorFlow.

Keras 2 and Keras 3 LossScaleOptimizers are not interchangeable (see
KERAS_API.md): a fix written for the wrong one is a crash or a silent
32768× update, so every fix is written for the generation found here.

Per file, the first of these that decides wins (``decide``):

1. the file itself selects Keras 2: it imports ``tf_keras`` or sets
   ``TF_USE_LEGACY_KERAS=1`` (true whatever is configured: ``tf_keras`` is Keras 2);
2. ``--keras 2|3`` / ``[tool.mpfix] keras = 2|3``;
3. the file uses an API only Keras 3 has (``keras.ops``, ``keras.config``); if it also uses
   an API only Keras 2 has (``FILE_EVIDENCE``), the file decides nothing and the target is unknown;
4. ``TF_USE_LEGACY_KERAS=1`` in mpfix's environment with tf-keras installed (Keras 2);
5. the project's declared dependencies (``mpfix.declared``): requirements files,
   ``pyproject.toml``, ``setup.cfg``, ``setup.py``, ``environment.yml``, ``Pipfile``, a
   Dockerfile's base image — what pre-commit and CI, which have no TensorFlow, can see;
6. the file uses an API only Keras 2 (TensorFlow <= 2.15) has: Keras 2, unless Keras 3 is
   installed next to mpfix: the file cannot run there, so the two disagree and the target is
   unknown (the match is textual: a comment naming ``tf.estimator`` must not buy a Keras 2 fix);
7. the packages installed next to mpfix (``importlib.metadata``);
8. nothing decides: the target is unknown. Findings are still reported, but a fix that
   would differ between the generations is withheld and the message says how to set it.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from mpfix import safe_read
from mpfix.project.kinds import KERAS2, KERAS3, Target

__all__ = ["KERAS2", "KERAS3", "DEFAULT", "Target", "decide", "installed"]

DEFAULT = KERAS3  # what the rules analyse with when the target is unknown (fixes are then withheld)

_TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tensorflow-intel",
                     "tf-nightly", "tf-nightly-cpu")

HOW_TO_SET = ('set `keras = 2` or `keras = 3` under [tool.mpfix] in pyproject.toml '
              '(or pass --keras 2|3)')
UNKNOWN_HINT = (" [no fix: the Keras generation of this file is unknown (nothing installed or declared decides it, "
                f"or the file uses APIs of both); {HOW_TO_SET}]")


def _version(dist: str) -> tuple[int, ...] | None:
    raw = _raw_version(dist)
    if raw is None:
        return None
    parts: list[int] = []
    for piece in raw.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _raw_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _legacy_keras_requested() -> bool:
    return os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")


@functools.lru_cache(maxsize=1)
def installed() -> Target:
    """What ``import tensorflow as tf; tf.keras`` gives next to mpfix (keras None: nothing installed)."""
    for dist in _TF_DISTRIBUTIONS:
        tf_version = _version(dist)
        if tf_version is None:
            continue
        found = f"installed {dist} {_raw_version(dist)}"
        if tf_version < (2, 16):
            return Target(KERAS2, f"{found} (TensorFlow < 2.16: tf.keras is Keras 2)")
        if _legacy_keras_requested() and _version("tf-keras") is not None:
            return Target(KERAS2, f"{found} with tf-keras and TF_USE_LEGACY_KERAS=1")
        return Target(KERAS3, f"{found} (TensorFlow >= 2.16: tf.keras is Keras 3)")
    keras_version = _version("keras")
    if keras_version is not None:
        generation = KERAS3 if keras_version >= (3,) else KERAS2
        return Target(generation, f"installed keras {_raw_version('keras')}")
    return Target(None, "no TensorFlow or Keras installed")


def installed_generation() -> int | None:
    """The Keras generation ``import tensorflow as tf; tf.keras`` gives here, or None."""
    return installed().keras


installed_generation.cache_clear = installed.cache_clear  # type: ignore[attr-defined]


# A script that selects legacy Keras itself, before importing TensorFlow:
# os.environ["TF_USE_LEGACY_KERAS"] = "1" / os.environ.setdefault("TF_USE_LEGACY_KERAS", "1").
_SETS_LEGACY_KERAS = re.compile(
    r"""TF_USE_LEGACY_KERAS['"]\s*(?:\]\s*=|,)\s*['"](?:1|true|True|yes)['"]""")
_IMPORTS_TF_KERAS = re.compile(
    r"^[ \t]*(?:from[ \t]+tf_keras\b|import[ \t]+(?:[\w.]+(?:[ \t]+as[ \t]+\w+)?[ \t]*,[ \t]*)*tf_keras\b)", re.M)


@dataclass(frozen=True)
class ApiEvidence:
    """An API only one Keras generation has, as a file spells it (one row of ``FILE_EVIDENCE``).

    ``pattern`` finds a use; a member call counts only when its receiver (group ``receiver``) is
    bound in the file from a call ``bound_from`` matches (``x = tf.keras.metrics.Mean()`` ...
    ``x.reset_states()``): Keras 3 RNN layers have ``reset_states`` too, so the name alone decides
    nothing. ``tests/test_target_evidence.py`` checks every row against the installed TensorFlow,
    Keras 3 and tf_keras.
    """

    api: str
    generation: int
    needle: str  # a substring every use contains (most files are ruled out without a regex)
    pattern: re.Pattern
    reference: str
    bound_from: re.Pattern | None = None  # an assignment whose group ``name`` is a name it binds

    def used_in(self, text: str) -> bool:
        if self.needle not in text:
            return False
        if self.bound_from is None:
            return self.pattern.search(text) is not None
        # One pass each way, whatever the number of uses (a file of 20,000 distinct receivers took
        # minutes when each use searched the text for its own binding).
        receivers = {match.group("receiver") for match in self.pattern.finditer(text)}
        return bool(receivers) and any(match.group("name") in receivers for match in self.bound_from.finditer(text))


FILE_EVIDENCE: tuple[ApiEvidence, ...] = (
    # KERAS_API.md: Keras 2 has no keras.config; keras.ops is new in 3.
    ApiEvidence("keras.ops / keras.config", KERAS3, "keras", re.compile(
        r"\bkeras\.(?:ops|config)\.|^[ \t]*from[ \t]+keras[ \t]+import[ \t]+[^\n]*\b(?:ops|config)\b", re.M),
        "new in Keras 3"),
    ApiEvidence("tf.estimator", KERAS2, "estimator", re.compile(r"\b(?:tf|tensorflow)(?:\.compat\.v[12])?\.estimator\b"),
                "TensorFlow 2.16 removed tf.estimator (release notes: use TF 2.15 or earlier), and TF <= 2.15's "
                "tf.keras is Keras 2"),
    ApiEvidence("keras.backend.set_learning_phase", KERAS2, "set_learning_phase", re.compile(r"\bkeras\.backend\.set_learning_phase\b"),
                "Keras 3's backend has no set_learning_phase"),
    ApiEvidence("keras.layers.experimental", KERAS2, "experimental", re.compile(r"\bkeras\.layers\.experimental\b"),
                "Keras 3 has no layers.experimental (its preprocessing layers moved to keras.layers)"),
    ApiEvidence("keras.optimizers.legacy", KERAS2, "legacy", re.compile(r"\bkeras\.optimizers\.legacy\.\w+[ \t]*\("),
                "Keras 3's optimizers.legacy classes raise ImportError when built"),
    ApiEvidence("Metric.reset_states", KERAS2, "reset_states",
                re.compile(r"(?P<receiver>\b[A-Za-z_]\w*(?:\.\w+){0,4})\.reset_states[ \t]*\("),
                "Keras 3 metrics have reset_state() only (RNN layers keep reset_states)",
                bound_from=re.compile(r"^[ \t]*(?P<name>[A-Za-z_]\w*(?:\.\w+){0,4})[ \t]*=[ \t]*"
                                      r"[\w.]{0,200}\bmetrics\.[A-Z]\w*[ \t]*\(", re.M)),
)


def file_evidence(text: str, generation: int) -> str | None:
    """The first API of ``FILE_EVIDENCE`` only ``generation`` has that ``text`` uses, or None."""
    for row in FILE_EVIDENCE:
        if row.generation == generation and row.used_in(text):
            return row.api
    return None


def selects_legacy_keras(text: str) -> bool:
    """True if the source sets ``TF_USE_LEGACY_KERAS`` to a true value itself."""
    return "TF_USE_LEGACY_KERAS" in text and _SETS_LEGACY_KERAS.search(text) is not None


def imports_tf_keras(text: str) -> bool:
    return "tf_keras" in text and _IMPORTS_TF_KERAS.search(text) is not None


def decide(configured: str | int | None, text: str, path: Path | None, tf_keras_import: bool | None = None) -> Target:
    """The Keras target of one file (see the module docstring for the order)."""
    if tf_keras_import is None:
        tf_keras_import = imports_tf_keras(text)
    if tf_keras_import:
        return Target(KERAS2, "the file imports tf_keras")
    if selects_legacy_keras(text):
        return Target(KERAS2, "the file sets TF_USE_LEGACY_KERAS=1")
    if configured not in (None, "auto", ""):
        return Target(int(configured), f"configured keras = {configured}")
    keras2_api = file_evidence(text, KERAS2)
    keras3_api = file_evidence(text, KERAS3)
    if keras3_api is not None:
        if keras2_api is not None:
            return Target(None, f"the file uses {keras3_api} (Keras 3 only) and {keras2_api} (Keras 2 only)")
        return Target(KERAS3, f"the file uses a Keras 3-only API ({keras3_api})")
    if _legacy_keras_requested() and _version("tf-keras") is not None:
        # Set where mpfix runs, with tf_keras installed: this is how the project runs Keras 2 on a
        # TensorFlow >= 2.16 its dependencies allow (they cannot say so themselves).
        return Target(KERAS2, "TF_USE_LEGACY_KERAS=1 is set and tf-keras is installed")
    if path is not None:
        from mpfix import declared

        found = declared.target_for(path)
        if found is not None:
            return found
    found = installed()
    if keras2_api is not None:
        if found.keras == KERAS3:
            return Target(None, f"the file uses {keras2_api}, which only Keras 2 has, but the {found.reason}")
        return Target(KERAS2, f"the file uses {keras2_api}, which only Keras 2 (TensorFlow <= 2.15) has")
    if found.known:
        return found
    return Target(None, "no TensorFlow or Keras installed, and the project declares no TensorFlow version "
                        "that decides it")


def generation_for(configured: str | int | None, keras2_file: bool) -> int:
    """Keras generation for one file, without looking at the project (kept for callers that have no path).

    A file that imports ``tf_keras`` or sets ``TF_USE_LEGACY_KERAS=1`` itself
    (``keras2_file``) runs Keras 2 whatever is installed or configured;
    otherwise ``--keras``/``[tool.mpfix] keras`` win, then the installed
    packages, then the default.
    """
    if keras2_file:
        return KERAS2
    if configured not in (None, "auto"):
        return int(configured)
    return installed_generation() or DEFAULT


def _file_text(path: Path) -> str:
    """The text the decision reads: the source, or a notebook's code cells (best effort, never raises)."""
    try:
        data = safe_read.read_bytes(path)
    except OSError:  # safe_read.Refused too: a FIFO, a device, a link out of the project
        return ""
    text = data.decode("utf-8", errors="replace")
    if path.suffix == ".ipynb":
        import json

        try:
            cells = json.loads(text).get("cells", [])
            text = "\n".join("".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", ""))
                             for c in cells if isinstance(c, dict) and c.get("cell_type") == "code")
        except (ValueError, AttributeError, TypeError, RecursionError):  # a malformed notebook
            return ""
    return text


def targets_of(files, configured: str | None) -> dict[str, tuple[int | None, str]]:
    """filename → (generation or None, why) for each file (``--verbose`` and SARIF run properties)."""
    return {str(path): (found.keras, found.reason)
            for path in files for found in [decide(configured, _file_text(Path(path)), Path(path))]}


def describe(targets: dict[str, tuple[int | None, str]], shown: int = 5) -> list[str]:
    """One line per distinct decision: the generation, why, how many files and which."""
    from mpfix.display import display_path

    groups: dict[tuple[int | None, str], list[str]] = {}
    for name, decision in targets.items():
        groups.setdefault(decision, []).append(display_path(name))
    lines = []
    for (keras, reason), names in sorted(groups.items(), key=lambda item: -len(item[1])):
        label = f"Keras {keras}" if keras is not None else "Keras generation unknown (fixes that differ are withheld)"
        listed = ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
        lines.append(f"{label} for {len(names)} file{'s' if len(names) != 1 else ''} ({listed}): {reason}")
        if keras is None:
            lines.append(f"  {HOW_TO_SET}")
    return lines
