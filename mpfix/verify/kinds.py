"""Records that ``run`` shares with ``locate`` and ``notebook``, which ``run`` imports: kept apart so
neither has to import ``run`` back (no import cycle, counting function-level imports)."""

from __future__ import annotations

from dataclasses import dataclass


class VerifyError(Exception):
    """A problem with the request itself (no GPU for --device gpu, missing script)."""


@dataclass
class Location:
    """Where --locate found the first NaN/Inf."""

    op: str | None
    frame: dict | None
    where: str
    rule: str | None = None
    rule_message: str | None = None
    detail: str = ""

    def to_json(self) -> dict:
        return {
            "op": self.op,
            "file": (self.frame or {}).get("file"),
            "line": (self.frame or {}).get("line"),
            "code": (self.frame or {}).get("code"),
            "where": self.where,
            "rule": self.rule,
            "rule_message": self.rule_message,
            "detail": self.detail,
        }
