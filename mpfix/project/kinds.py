"""The vocabularies of project facts: dtype policies and Keras targets (the lowest layer: no imports of mpfix)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Policy(str, enum.Enum):
    NONE = "none"  # float32 only, as far as we can see
    FLOAT16 = "mixed_float16"
    BFLOAT16 = "mixed_bfloat16"

    def __str__(self) -> str:
        return self.value


KERAS2 = 2
KERAS3 = 3


@dataclass(frozen=True)
class Target:
    """The decided Keras generation (None: unknown) and why, for ``--verbose`` and SARIF."""

    keras: int | None
    reason: str

    @property
    def known(self) -> bool:
        return self.keras is not None

    def describe(self) -> str:
        return f"Keras {self.keras}" if self.known else "Keras unknown"
