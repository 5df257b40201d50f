"""Settings: ``[tool.mpfix]`` in the nearest ``pyproject.toml``, then the command line."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ConfigError(Exception):
    """A setting that cannot be used (exit code 2)."""


DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] = ("ALL",)
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per_file_ignores: dict[str, tuple[str, ...]] = field(default_factory=dict)
    keras: str = "auto"  # "auto", "2" or "3"
    policy: str | None = None  # "mixed_float16"/"mixed_bfloat16" forces float16 reachability
    unsafe_fixes: bool = False
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    config_file: Path | None = None

    def with_overrides(self, **changes: Any) -> "Settings":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


_KEYS = {
    "select", "ignore", "extend-select", "exclude", "per-file-ignores",
    "keras", "policy", "unsafe-fixes", "max-file-size",
}


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.mpfix]`` table, at or above ``start``.

    A ``pyproject.toml`` on the way that is not valid TOML is a ConfigError (exit 2), as in
    Ruff: it may hold the settings the user expects, and skipping it silently would check
    with others.
    """
    start = start.resolve()
    folder = start if start.is_dir() else start.parent
    for parent in [folder, *folder.parents]:
        candidate = parent / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except OSError:
                continue
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{candidate}: not UTF-8 ({exc.reason})") from exc
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{candidate}: not valid TOML: {exc}") from exc
            if "mpfix" in data.get("tool", {}):
                return candidate
    return None


def _codes(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.mpfix] {key} must be a list of rule codes")
    return tuple(v.strip().upper() for v in value)


def load(pyproject: Path | None) -> Settings:
    """Settings from ``pyproject``'s ``[tool.mpfix]`` (defaults when None)."""
    if pyproject is None:
        return Settings()
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{pyproject}: cannot read [tool.mpfix]: {exc}") from exc
    table = data.get("tool", {}).get("mpfix", {})
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"{pyproject}: unknown [tool.mpfix] keys: {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    settings = Settings(config_file=pyproject)
    changes: dict[str, Any] = {}
    if "select" in table:
        changes["select"] = _codes(table["select"], "select")
    if "extend-select" in table:
        changes["extend_select"] = _codes(table["extend-select"], "extend-select")
    if "ignore" in table:
        changes["ignore"] = _codes(table["ignore"], "ignore")
    if "exclude" in table:
        exclude = table["exclude"]
        if not isinstance(exclude, list) or not all(isinstance(v, str) for v in exclude):
            raise ConfigError(f"{pyproject}: [tool.mpfix] exclude must be a list of globs")
        changes["exclude"] = tuple(exclude)
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, dict):
            raise ConfigError(f"{pyproject}: [tool.mpfix] per-file-ignores must be a table of glob = [codes]")
        changes["per_file_ignores"] = {glob: _codes(codes, f"per-file-ignores.{glob}") for glob, codes in pfi.items()}
    if "keras" in table:
        keras = str(table["keras"])
        if keras not in ("auto", "2", "3"):
            raise ConfigError(f"{pyproject}: [tool.mpfix] keras must be 2, 3 or \"auto\", not {table['keras']!r}")
        changes["keras"] = keras
    if "policy" in table:
        policy = table["policy"]
        if policy not in ("mixed_float16", "mixed_bfloat16", "float32"):
            raise ConfigError(f"{pyproject}: [tool.mpfix] policy must be \"mixed_float16\", \"mixed_bfloat16\" or \"float32\"")
        changes["policy"] = policy
    if "unsafe-fixes" in table:
        changes["unsafe_fixes"] = bool(table["unsafe-fixes"])
    if "max-file-size" in table:
        changes["max_file_bytes"] = int(table["max-file-size"])
    return replace(settings, **changes)
