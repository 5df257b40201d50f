"""Settings: ``[tool.mpfix]`` in the nearest ``pyproject.toml``, then the command line."""

from __future__ import annotations

import enum
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mpfix.safe_read import DEFAULT_LIMIT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ConfigError(Exception):
    """A setting that cannot be used (exit code 2)."""


DEFAULT_MAX_FILE_BYTES = DEFAULT_LIMIT


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


class Kind(enum.Enum):
    """The TOML type a ``[tool.mpfix]`` key takes."""

    BOOL = "true or false"
    SIZE = "a whole number of bytes (at least 1)"
    CODES = "a list of rule codes"
    GLOBS = "a list of globs"
    CODES_BY_GLOB = "a table of glob = [codes]"
    CHOICE = "one of"


@dataclass(frozen=True)
class Key:
    """One key of the schema: its TOML name, the ``Settings`` field and the type it must have."""

    name: str
    field: str
    kind: Kind
    choices: tuple[str, ...] = ()


# The schema of ``[tool.mpfix]``: a value of another type is a ConfigError naming the key (exit 2),
# never coerced (``unsafe-fixes = "false"`` was ``bool("false")``, i.e. true).
SCHEMA: tuple[Key, ...] = (
    Key("select", "select", Kind.CODES),
    Key("extend-select", "extend_select", Kind.CODES),
    Key("ignore", "ignore", Kind.CODES),
    Key("exclude", "exclude", Kind.GLOBS),
    Key("per-file-ignores", "per_file_ignores", Kind.CODES_BY_GLOB),
    Key("keras", "keras", Kind.CHOICE, ("2", "3", "auto")),
    Key("policy", "policy", Kind.CHOICE, ("mixed_float16", "mixed_bfloat16", "float32")),
    Key("unsafe-fixes", "unsafe_fixes", Kind.BOOL),
    Key("max-file-size", "max_file_bytes", Kind.SIZE),
)
_KEYS = {key.name for key in SCHEMA}


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.mpfix]`` table, at or above ``start``.

    A ``pyproject.toml`` on the way that is not valid TOML is a ConfigError (exit 2), as in
    Ruff: it may hold the settings the user expects, and skipping it silently would check
    with others. The same holds for one that cannot be read (over 2 MiB, no permission).
    """
    start = start.resolve()
    folder = start if start.is_dir() else start.parent
    for parent in [folder, *folder.parents]:
        candidate = parent / "pyproject.toml"
        if candidate.is_file():
            try:
                data = _toml(candidate)
            except OSError as exc:
                # Unreadable (over safe_read's 2 MiB, no permission) is exit 2 like invalid TOML:
                # skipping it silently would check with other settings than the user wrote.
                from mpfix import safe_read

                why = ("over the 2 MiB limit" if getattr(exc, "reason", None) is safe_read.Reason.TOO_LARGE
                       else exc.strerror or str(exc))
                raise ConfigError(f"{candidate}: cannot be read ({why})") from None
            if "mpfix" in _tool(data, candidate):
                return candidate
    return None


def _toml(path: Path) -> dict:
    """``path`` read as TOML: OSError when it cannot be read (a FIFO, a device or a file over 2 MiB:
    ``safe_read``), ConfigError (exit 2) when it is not UTF-8 or not TOML, or nests too deeply for
    ``tomllib`` (a RecursionError there)."""
    from mpfix import safe_read

    text = safe_read.read_bytes(path, follow_outside=True)
    try:
        return tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not TOML mpfix can read: a value is nested too deeply") from None


def _tool(data: dict, path: Path) -> dict:
    """The ``[tool]`` table; ConfigError when ``tool`` is something else (``tool = 5``): the file is not a
    ``pyproject.toml`` anyone can read settings from (Ruff refuses it too)."""
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: [tool] must be a table, not {type(tool).__name__}")
    return tool


def _codes(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.mpfix] {key} must be a list of rule codes")
    return tuple(v.strip().upper() for v in value)


def _typed(key: Key, value: Any) -> Any:
    """``value`` as ``key``'s Settings value; ConfigError (naming the key) when it has another type."""
    def wrong(what: str = key.kind.value) -> ConfigError:
        return ConfigError(f"[tool.mpfix] {key.name} must be {what}, not {value!r}")

    if key.kind is Kind.BOOL:
        if not isinstance(value, bool):
            raise wrong()
        return value
    if key.kind is Kind.SIZE:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise wrong()
        return value
    if key.kind is Kind.CODES:
        return _codes(value, key.name)
    if key.kind is Kind.GLOBS:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise wrong()
        from mpfix.discovery import MAX_GLOBSTARS, too_many_globstars

        for glob in value:
            if too_many_globstars(glob):
                raise ConfigError(f"[tool.mpfix] {key.name}: {glob!r} has more than {MAX_GLOBSTARS} `**` "
                                  "(matching it could take hours)")
        return tuple(value)
    if key.kind is Kind.CODES_BY_GLOB:
        if not isinstance(value, dict):
            raise wrong()
        return {glob: _codes(codes, f"{key.name}.{glob}") for glob, codes in value.items()}
    # Kind.CHOICE: ``keras = 2`` is an integer in TOML, so whole numbers are read as their text.
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or text not in key.choices:
        shown = [c if c.isdigit() else f'"{c}"' for c in key.choices]
        raise wrong(f"{', '.join(shown[:-1])} or {shown[-1]}")
    return text


def load(pyproject: Path | None) -> Settings:
    """Settings from ``pyproject``'s ``[tool.mpfix]`` (defaults when None), typed by ``SCHEMA``."""
    if pyproject is None:
        return Settings()
    try:
        data = _toml(pyproject)
    except OSError as exc:
        raise ConfigError(f"{pyproject}: cannot read [tool.mpfix]: {exc}") from None
    table = _tool(data, pyproject).get("mpfix", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.mpfix] must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"{pyproject}: unknown [tool.mpfix] keys: {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    changes: dict[str, Any] = {}
    for key in SCHEMA:
        if key.name in table:
            try:
                changes[key.field] = _typed(key, table[key.name])
            except ConfigError as exc:
                raise ConfigError(f"{pyproject}: {exc}") from None
    return replace(Settings(config_file=pyproject), **changes)


def settings_for_file(path: Path) -> Settings:
    """The settings of the ``[tool.mpfix]`` closest to ``path`` (Ruff's hierarchical configuration)."""
    return load(find_pyproject(Path(path)))


def by_closest_config(files: list[Path], settings: Settings, overrides: dict[str, Any]) -> list[tuple[Settings, list[Path]]]:
    """``files`` grouped by the ``[tool.mpfix]`` closest to each (in order of first file), each group
    with that configuration's settings and the command line's ``overrides`` on top, as in Ruff:
    ``sub/pyproject.toml`` applies to ``sub/a.py`` in ``mpfix check .`` as in ``mpfix check sub/a.py``.
    Files whose closest configuration is ``settings``' own stay with ``settings``.

    That includes its ``exclude``: a file a nearer configuration excludes is dropped, its globs
    matched against the path below that configuration's folder (``discovery`` already applied
    ``settings``' own globs, which therefore still hold below: mpfix has no ``extend``)."""
    from mpfix.discovery import is_excluded

    groups: dict[Path | None, tuple[Settings, list[Path]]] = {}
    by_folder: dict[Path, tuple[Path | None, Path]] = {}
    for file in files:
        folder = Path(os.path.abspath(file)).parent  # the file itself may be a symlink loop (MP000 later)
        if folder not in by_folder:
            by_folder[folder] = (find_pyproject(folder), folder.resolve())
        pyproject, real_folder = by_folder[folder]
        if pyproject is not None and settings.config_file is not None and pyproject == settings.config_file.resolve():
            pyproject = settings.config_file
        if pyproject not in groups:
            own = settings if pyproject == settings.config_file else load(pyproject).with_overrides(**overrides)
            groups[pyproject] = (own, [])
        own = groups[pyproject][0]
        if own is not settings and own.exclude and pyproject is not None:
            try:  # find_pyproject resolved the folder: the file's place below its configuration
                below = real_folder.relative_to(pyproject.parent) / Path(file).name
            except ValueError:
                below = Path(file)
            if is_excluded(below, own.exclude):
                continue
        groups[pyproject][1].append(file)
    return [group for group in groups.values() if group[1]]
