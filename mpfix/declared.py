"""The Keras generation a project declares: its TensorFlow/Keras requirements, read, never executed.

pre-commit and CI environments have no TensorFlow installed, so what the project
*declares* is the best evidence of what it runs: a TF 2.15 project pins
``tensorflow<2.16`` somewhere. Read here, from the file's folder up to its
project root (the nearest folder with ``pyproject.toml``, ``setup.py`` or
``.git``); the nearest folder that declares something decides:

* ``requirements*.txt`` (and ``requirements/*.txt``, following ``-r`` includes),
* ``pyproject.toml``: ``[project]`` dependencies and optional dependencies, Poetry's
  dependencies and groups,
* ``setup.cfg`` ``install_requires``/``extras_require``; ``setup.py``'s ``install_requires``
  (parsed with ``ast``: literal lists and names bound to them),
* ``environment.yml`` (conda and its ``pip:`` list), ``Pipfile``,
* a ``Dockerfile``'s base image: ``tensorflow/tensorflow:2.15.0`` or NGC's
  ``nvcr.io/nvidia/tensorflow:YY.MM-tf2-py3``, and its ``pip install`` lines.

``packaging.specifiers`` decides whether the TensorFlow versions the requirements
allow are all below 2.16 (Keras 2) or all from 2.16 on (Keras 3); a required
``tf-keras``, ``keras>=3`` and ``keras<3`` decide as well. Conflicting or open
requirements (``tensorflow>=2.10``) decide nothing.

The same declarations bound the TensorFlow version (``tf_max_for``: the newest TF
``(major, minor)`` they allow, from the requirements or else the base image's TF;
None when open). Rules whose fix uses an API a later TensorFlow added read it as
``RuleContext.tf_max`` (MP306: ``reduce_retracing`` is TF 2.9+).
"""

from __future__ import annotations

import configparser
import functools
import os
import re
import sys
from pathlib import Path

from mpfix import safe_read
from mpfix.container_images import image_generation, image_tf_max, image_tf_min
from mpfix.declared_evidence import Evidence, Unreadable, _poetry, decide, newest_tf, oldest_tf
from mpfix.project import root_of_folder
from mpfix.project.kinds import Target

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_MAX_BYTES = 2_000_000


# -- reading the files ------------------------------------------------------------------------

def _read(path: Path) -> str | None:
    try:
        return safe_read.read_text(path, _MAX_BYTES)
    except OSError:
        return None


def _requirements_file(path: Path, evidence: Evidence, root: Path, seen: set[Path]) -> None:
    if path in seen or len(seen) > 50:
        return
    seen.add(path)
    text = _read(path)
    if text is None:
        return
    where = _rel(path, root)
    joined = re.sub(r"\\\r?\n", " ", text)
    for line in joined.splitlines():
        line = line.strip()
        include = re.match(r"(?:-r|--requirement|-c|--constraint)\s*=?\s*(\S+)", line)
        if include:
            _requirements_file((path.parent / include.group(1)), evidence, root, seen)
            continue
        evidence.add_requirement(line, where)


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _pyproject(path: Path, evidence: Evidence, root: Path) -> None:
    text = _read(path)
    if text is None:
        return
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):  # RecursionError: nested too deeply for tomllib
        return  # reported by the settings loader when it matters
    where = _rel(path, root)
    project = data.get("project", {})
    if not isinstance(project, dict):  # `project = 5`: not a table, so no dependencies to read
        project = {}
    for item in _strings(project.get("dependencies")):
        evidence.add_requirement(item, where)
    optional = project.get("optional-dependencies", {})
    if isinstance(optional, dict):
        for items in optional.values():
            for item in _strings(items):
                evidence.add_requirement(item, where, optional=True)
    tool = data.get("tool", {})
    poetry = tool.get("poetry", {}) if isinstance(tool, dict) else None
    if isinstance(poetry, dict):
        _poetry_table(poetry.get("dependencies"), evidence, where, optional=False)
        _poetry_table(poetry.get("dev-dependencies"), evidence, where, optional=True)
        groups = poetry.get("group", {})
        if isinstance(groups, dict):
            for group in groups.values():
                if isinstance(group, dict):
                    _poetry_table(group.get("dependencies"), evidence, where, optional=True)


def _strings(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _poetry_table(table, evidence: Evidence, where: str, optional: bool) -> None:
    """Poetry's and Pipfile's ``name = "spec"`` / ``name = {version = "spec"}`` tables."""
    if not isinstance(table, dict):
        return
    for name, value in table.items():
        if isinstance(value, dict):
            value = value.get("version", "*")
        if isinstance(value, list):  # Poetry's multiple-constraint form: undecidable here
            value = "*"
        if not isinstance(value, str):
            continue
        spec = value.strip()
        spec = "" if spec == "*" else _poetry(spec)
        evidence.add_requirement(f"{name} {spec}".strip() if spec and spec[0] not in "<>=!~" else f"{name}{spec}",
                                 where, optional=optional)


def _setup_cfg(path: Path, evidence: Evidence, root: Path) -> None:
    text = _read(path)
    if text is None:
        return
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return
    where = _rel(path, root)
    if parser.has_option("options", "install_requires"):
        for line in parser.get("options", "install_requires").splitlines():
            evidence.add_requirement(line, where)
    if parser.has_section("options.extras_require"):
        for _, value in parser.items("options.extras_require"):
            for line in value.splitlines():
                evidence.add_requirement(line, where, optional=True)


def _setup_py(path: Path, evidence: Evidence, root: Path) -> None:
    text = _read(path)
    if text is None:
        return
    from mpfix import setup_py

    found = setup_py.read(text)
    if found is None:
        return
    where = _rel(path, root)
    for item in found.required:
        evidence.add_requirement(item, where)
    for item in found.optional:
        evidence.add_requirement(item, where, optional=True)
    for source, strings in found.unreadable:
        # ``install_requires=open("requirements.txt").read().splitlines()``: read through that file.
        if strings and any(_is_requirements_file(path.parent, s) for s in strings):
            continue
        evidence.unreadable.append(Unreadable(where, source))


def _is_requirements_file(folder: Path, name: str) -> bool:
    if not name or len(name) > 200 or "\n" in name:
        return False
    candidate = folder / name
    return _READERS[0][0].match(candidate.name) is not None and candidate.is_file()


def _environment_yml(path: Path, evidence: Evidence, root: Path) -> None:
    """conda's ``dependencies:`` list and its ``pip:`` sublist, read line by line (no YAML library needed)."""
    text = _read(path)
    if text is None:
        return
    where = _rel(path, root)
    in_dependencies = False
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith((" ", "\t", "-")):
            in_dependencies = line.split(":", 1)[0].strip() == "dependencies"
            continue
        if not in_dependencies:
            continue
        item = re.match(r"\s*-\s*['\"]?([^'\"#]+)", line)
        if item is None:
            continue
        value = item.group(1).strip()
        if value.endswith(":"):
            continue  # "- pip:"
        if "::" in value:
            value = value.split("::", 1)[1]  # conda-forge::tensorflow=2.15
        conda = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:=\s*([\d.*]+)(?:=\S+)?|\s+([\d.*]+))", value)
        if conda and "==" not in value:
            version = conda.group(2) or conda.group(3)
            # conda's "=2.15" means 2.15.*; a space-separated version likewise.
            spec = f"=={version}" if version.endswith("*") else f"=={version}.*"
            evidence.add_requirement(conda.group(1) + spec, where)
        else:
            evidence.add_requirement(value, where)


def _pipfile(path: Path, evidence: Evidence, root: Path) -> None:
    text = _read(path)
    if text is None:
        return
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return
    where = _rel(path, root)
    _poetry_table(data.get("packages"), evidence, where, optional=False)
    _poetry_table(data.get("dev-packages"), evidence, where, optional=True)


_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.I | re.M)
_ARG = re.compile(r"^\s*ARG\s+(\w+)=(\S+)", re.I | re.M)
_ARG_USE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)")
_LEGACY_ENV = re.compile(r"^\s*ENV\s+(?:[^\n]*\s)?TF_USE_LEGACY_KERAS[= ]\s*[\"']?(?:1|true|True|yes)\b", re.M)
_PIP_INSTALL = re.compile(r"pip3?\s+install\s+([^\n&;|]+)")


def _dockerfile(path: Path, evidence: Evidence, root: Path) -> None:
    text = _read(path)
    if text is None:
        return
    where = _rel(path, root)
    text = re.sub(r"\\\r?\n", " ", text)
    defaults = {name: value.strip("'\"") for name, value in _ARG.findall(text)}
    for image in _FROM.findall(text):
        # `ARG FROM_IMAGE_NAME=nvcr.io/...` then `FROM ${FROM_IMAGE_NAME}`: the ARG's default is the image
        # a plain `docker build` uses (DeepLearningExamples writes every Dockerfile this way).
        image = _ARG_USE.sub(lambda m: defaults.get(m.group(1) or m.group(3), m.group(2) or m.group(0)), image)
        generation = image_generation(image)
        if generation is not None:
            evidence.images.append((generation, f"{where}: FROM {image}"))
        newest = image_tf_max(image)
        if newest is not None:
            evidence.image_tf.append((newest, f"{where}: FROM {image}"))
        oldest = image_tf_min(image)
        if oldest is not None:
            evidence.image_tf_min.append((oldest, f"{where}: FROM {image}"))
    if _LEGACY_ENV.search(text):
        evidence.legacy_env.append(where)
    for args in _PIP_INSTALL.findall(text):
        for token in args.split():
            token = token.strip("'\"")
            if token.startswith("-"):
                continue
            evidence.add_requirement(token, where)


_READERS = (
    (re.compile(r"requirements.*\.(?:txt|in)$|.*requirements\.txt$|constraints.*\.txt$"), "requirements"),
    (re.compile(r"pyproject\.toml$"), "pyproject"),
    (re.compile(r"setup\.cfg$"), "setup_cfg"),
    (re.compile(r"setup\.py$"), "setup_py"),
    (re.compile(r"(?:environment|conda|env)[\w.-]*\.ya?ml$"), "environment"),
    (re.compile(r"Pipfile$"), "pipfile"),
    (re.compile(r"(?:.*\.)?Dockerfile(?:\..*)?$|Containerfile$", re.I), "dockerfile"),
)


def evidence_in(folder: Path, root: Path) -> Evidence:
    evidence = Evidence()
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return evidence
    seen: set[Path] = set()
    for name in names:
        path = folder / name
        for pattern, kind in _READERS:
            if not pattern.match(name):
                continue
            if kind == "requirements":
                if path.is_file():
                    _requirements_file(path, evidence, root, seen)
            elif not path.is_file():
                pass
            elif kind == "pyproject":
                _pyproject(path, evidence, root)
            elif kind == "setup_cfg":
                _setup_cfg(path, evidence, root)
            elif kind == "setup_py":
                _setup_py(path, evidence, root)
            elif kind == "environment":
                _environment_yml(path, evidence, root)
            elif kind == "pipfile":
                _pipfile(path, evidence, root)
            elif kind == "dockerfile":
                _dockerfile(path, evidence, root)
            break
    requirements_dir = folder / "requirements"
    if requirements_dir.is_dir():
        try:
            for name in sorted(os.listdir(requirements_dir)):
                if name.endswith((".txt", ".in")):
                    _requirements_file(requirements_dir / name, evidence, root, seen)
        except OSError:
            pass
    return evidence


def _project_root(folder: Path, cwd: str) -> Path | None:
    root = root_of_folder(str(folder), cwd)
    return None if root is None else Path(root)


def _folders_up(folder: Path, cwd: str) -> tuple[Path, list[Path]]:
    """(the project root, or ``folder`` when there is none; ``folder`` and its parents up to that root)."""
    root = _project_root(folder, cwd)
    chain = [folder]
    if root is not None and root != folder:
        for parent in folder.parents:
            chain.append(parent)
            if parent == root:
                break
    return root or folder, chain


@functools.lru_cache(maxsize=256)
def _target_for_folder(folder: Path, cwd: str) -> Target | None:
    root, chain = _folders_up(folder, cwd)
    for current in chain:
        found = _decided_in(current, root)
        if found is not None:
            return found
    return None


@functools.lru_cache(maxsize=1024)
def _evidence(folder: Path, root: Path) -> Evidence:
    """``evidence_in``, read once per folder and run (callers must not change it)."""
    return evidence_in(folder, root)


@functools.lru_cache(maxsize=1024)
def _decided_in(folder: Path, root: Path) -> Target | None:
    """What the declarations in ``folder`` alone decide (each folder is read once per run).

    A folder whose readable declarations decide nothing but which has one that cannot be read
    (``f"tensorflow>={MIN},<{MAX}"`` with ``MAX`` imported) decides "unknown": the project does say
    which TensorFlow it runs, mpfix just cannot tell, so neither a parent folder nor the installed
    TensorFlow may answer for it.
    """
    evidence = _evidence(folder, root)
    if evidence.empty():
        return None
    found = decide(evidence)
    if found is None and evidence.unreadable:
        return Target(None, unreadable_reason(evidence.unreadable))
    return found


def unreadable_reason(items) -> str:
    listed = "; ".join(u.describe() for u in items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")
    return (f"declared dependencies cannot be read ({listed}): the Keras generation is unknown, "
            "not taken from the installed TensorFlow")


@functools.lru_cache(maxsize=256)
def _tf_max_for_folder(folder: Path, cwd: str) -> tuple[tuple[int, int], str] | None:
    root, chain = _folders_up(folder, cwd)
    for current in chain:
        evidence = _evidence(current, root)
        if evidence.tf_specs or evidence.image_tf:
            return newest_tf(evidence)
        if evidence.unreadable:
            return None  # declared, but not readably: open
    return None


@functools.lru_cache(maxsize=256)
def _tf_min_for_folder(folder: Path, cwd: str) -> tuple[int, int] | None:
    root, chain = _folders_up(folder, cwd)
    for current in chain:
        evidence = _evidence(current, root)
        if evidence.tf_specs or evidence.image_tf or evidence.image_tf_min:
            return oldest_tf(evidence)
        if evidence.unreadable:
            return None
    return None


def tf_min_for(path: Path) -> tuple[int, int] | None:
    """The oldest TensorFlow (major, minor) the project around ``path`` declares it runs; None: open or unknown.

    A fix whose replacement API appeared in a later TensorFlow than this breaks the project there
    (MP301/MP302: the stable mixed_precision API is TF 2.4+; an NGC 20.07 image ships TF 2.2).
    """
    try:
        folder = Path(os.path.abspath(path)).parent
    except (OSError, ValueError):
        return None
    return _tf_min_for_folder(folder, os.getcwd())


def tf_max_for(path: Path) -> tuple[int, int] | None:
    """The newest TensorFlow (major, minor) the project around ``path`` declares it runs; None: open or unknown.

    Read like the Keras generation (the nearest folder that declares TensorFlow decides). Rules whose
    fix uses an API that appeared in a later TensorFlow ask this (``RuleContext.tf_max``).
    """
    return _tf_max_at(_folder_text(path), os.getcwd())


def _folder_text(path: Path) -> str | None:
    """The absolute folder of ``path`` as a string (None: no such path), the key of the per-folder memos below."""
    try:
        return os.path.dirname(os.path.abspath(path))
    except (OSError, ValueError):
        return None


# Per folder string, in front of the per-folder caches (keyed by ``Path``): every file's cache key and its engine
# pass ask these (``project.facts.file_facts``: ~1,650 calls on tf-models), and building the ``Path`` of each
# question cost more than the answer. Cleared with them (``clear``).
@functools.lru_cache(maxsize=4096)
def _tf_max_at(folder: str | None, cwd: str) -> tuple[int, int] | None:
    found = None if folder is None else _tf_max_for_folder(Path(folder), cwd)
    return None if found is None else found[0]


@functools.lru_cache(maxsize=4096)
def _cache_key_at(folder: str | None, cwd: str) -> str:
    if folder is None:
        return ""
    path = Path(folder)
    found = _target_for_folder(path, cwd)
    newest = _tf_max_for_folder(path, cwd)
    bound = "" if newest is None else f"|tf<={newest[0][0]}.{newest[0][1]}"
    oldest = _tf_min_for_folder(path, cwd)
    bound += "" if oldest is None else f"|tf>={oldest[0]}.{oldest[1]}"
    return ("" if found is None else f"{found.keras}:{found.reason}") + bound


def tf_max_reason(path: Path) -> tuple[tuple[int, int], str] | None:
    """``tf_max_for`` with where it was declared."""
    try:
        folder = Path(os.path.abspath(path)).parent
    except (OSError, ValueError):
        return None
    return _tf_max_for_folder(folder, os.getcwd())


def unreadable(path: Path) -> tuple[Unreadable, ...]:
    """The declarations that cannot be read in the folder that decides ``path``'s target (or, when
    none decides, in any folder up to the project root): for ``-v`` and the run metadata."""
    try:
        folder = Path(os.path.abspath(path)).parent
    except (OSError, ValueError):
        return ()
    root, chain = _folders_up(folder, os.getcwd())
    for current in chain:
        evidence = _evidence(current, root)
        if evidence.unreadable:
            return tuple(evidence.unreadable)
        if _decided_in(current, root) is not None:
            return ()
    return ()


def target_for(path: Path) -> Target | None:
    """The generation the project around ``path`` declares; None when its declarations decide nothing."""
    try:
        folder = Path(os.path.abspath(path)).parent
    except (OSError, ValueError):
        return None
    return _target_for_folder(folder, os.getcwd())


def cache_key(path: Path) -> str:
    """What the declarations decide for ``path``, as a string for cache keys."""
    return _cache_key_at(_folder_text(path), os.getcwd())


def clear() -> None:
    """Forget what was read (the files changed)."""
    _tf_max_at.cache_clear()
    _cache_key_at.cache_clear()
    _target_for_folder.cache_clear()
    _decided_in.cache_clear()
    _tf_max_for_folder.cache_clear()
    _tf_min_for_folder.cache_clear()
    _evidence.cache_clear()
