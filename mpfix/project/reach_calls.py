"""Whether a name in a file's bytes is a call of a project function (the reach scan's setters' callers,
``mpfix.project.reachability``): bytes only, no parse."""

from __future__ import annotations

import re

from mpfix.project.entries import line_prefix


def is_call_of(code: bytes, start: int, end: int, prefix: bytes) -> bool:
    """Whether the name at ``code[start:end]`` is called bare (``f(``) or used on its module
    (``module.f(``, or ``app.run(module.f)``, which calls it later)."""
    before = code[start - 1:start]
    after = code[end:end + 1]
    if (before and (before.isalnum() or before == b"_")) or (after and (after.isalnum() or after == b"_")):
        return False  # part of a longer name
    if before == b".":
        if not code[:start].endswith(prefix):
            return False  # a method of something else
        head = code[start - len(prefix) - 1:start - len(prefix)]
        return not (head and (head.isalnum() or head == b"_"))
    if not re.match(rb"\s*\(", code[end:end + 20]):
        return False
    return not line_prefix(code, start).lstrip().startswith((b"def ", b"async def "))
