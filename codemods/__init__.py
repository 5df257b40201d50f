"""mpfix rules. Every ``Rule`` subclass in a module of this package is registered.

Modules whose names start with ``_`` are helpers and are not scanned. Adding a
rule means adding a class; no list to edit.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from mpfix.codemods.base import Invalid, Rule, RuleContext, Valid

__all__ = ["Invalid", "Rule", "RuleContext", "Valid", "all_rules", "rule_by_code"]

_NOT_RULE_MODULES = {"base", "names", "analysis"}


@functools.lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code."""
    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name in _NOT_RULE_MODULES:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and getattr(value, "code", None):
                if value.__module__ != module.__name__:
                    continue
                other = found.get(value.code)
                if other is not None and other is not value:
                    raise RuntimeError(f"two rules claim {value.code}: {other.__qualname__} and {value.__qualname__}")
                found[value.code] = value
    return tuple(sorted(found.values(), key=lambda r: r.code))


def rule_by_code(code: str) -> type[Rule] | None:
    code = code.upper()
    return next((r for r in all_rules() if r.code == code), None)
