"""The dtype policies a project can run under (the lowest layer: no imports of mpfix)."""

from __future__ import annotations

import enum


class Policy(str, enum.Enum):
    NONE = "none"  # float32 only, as far as we can see
    FLOAT16 = "mixed_float16"
    BFLOAT16 = "mixed_bfloat16"

    def __str__(self) -> str:
        return self.value
