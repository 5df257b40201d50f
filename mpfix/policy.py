"""Whether float16 compute can reach a file: the dtype policy of the module and its project.

A mixed policy is global state, so it is often set in one module (``train.py``)
and felt in another (``layers.py``). We find it by scanning text, which costs a
fraction of a parse: a ``"mixed_float16"`` string means float16 can be reached.
"""

from __future__ import annotations

import enum
import functools
import re
from pathlib import Path

_FLOAT16 = re.compile(r"""['"]mixed_float16['"]""")
_BFLOAT16 = re.compile(r"""['"]mixed_bfloat16['"]""")
_FLOAT16_BYTES = re.compile(rb"""['"]mixed_float16['"]""")
_BFLOAT16_BYTES = re.compile(rb"""['"]mixed_bfloat16['"]""")


class Policy(str, enum.Enum):
    NONE = "none"  # float32 only, as far as we can see
    FLOAT16 = "mixed_float16"
    BFLOAT16 = "mixed_bfloat16"

    def __str__(self) -> str:
        return self.value


def policy_in_text(text: str) -> Policy:
    """The mixed policy a source text names; float16 wins when both appear."""
    if _FLOAT16.search(text):
        return Policy.FLOAT16
    if _BFLOAT16.search(text):
        return Policy.BFLOAT16
    return Policy.NONE


def project_root(path: Path) -> Path:
    """Nearest folder above ``path`` with a ``pyproject.toml``, ``setup.py`` or ``.git``."""
    try:
        path = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        path = path.absolute()
    for parent in [path.parent, *path.parent.parents]:
        if any((parent / marker).exists() for marker in ("pyproject.toml", "setup.py", ".git")):
            return parent
    return path.parent


@functools.lru_cache(maxsize=32)
def policy_in_project(root: Path) -> Policy:
    """The mixed policy any Python file of the project names (discovery rules apply)."""
    from mpfix.discovery import discover  # local: discovery imports config

    found = Policy.NONE
    for file in discover([root], exclude=()):
        if file.suffix != ".py":
            continue
        # Bytes, not decoded text: the policy names are ASCII in every encoding we read.
        try:
            data = file.read_bytes()
        except OSError:
            continue
        if _FLOAT16_BYTES.search(data):
            return Policy.FLOAT16
        if _BFLOAT16_BYTES.search(data):
            found = Policy.BFLOAT16
    return found
