"""Float16 reachability by entry points: which files of a project run under a mixed policy, and why.

A mixed policy is global state: set in one module (``train.py``), felt in the modules it
imports. So a file is float16-reachable when

* it is an **entry point**: it sets a mixed policy (``set_global_policy("mixed_float16")``,
  ``Policy("mixed_float16")``, ``dtype="mixed_float16"`` on a layer, a ``policy=`` setting),
  switches grappler's ``auto_mixed_precision`` on, sets ``TF_ENABLE_AUTO_MIXED_PRECISION`` to a
  true value, or calls a function of the project that does one of these;
* or an entry point imports it within the project (``import pkg.mod``, ``from . import x``,
  transitively; importing ``pkg.mod`` runs ``pkg/__init__.py`` too). The layers and models an
  entry point builds are the ones it imports;
* or it is a test that takes a pytest fixture parametrised over the policy
  (``@pytest.fixture(params=["float32", "mixed_float16"])`` in a ``conftest.py``, or in a module
  a conftest imports, reaches the tests under that folder that use the fixture; ``parametrize``
  reaches its own test module), or a library module such a test imports: the library's own
  tests run it under the policy. The fixture reaches nothing else: not the tests that do not
  take it, nor scripts, tutorials and notebooks, nor library modules no such test imports.

Within a test module that sets or takes the policy only in some tests, only those tests (and the
module-level helpers they use) run under it: ``Reach.partial``, with the lines from
``mpfix.project.fixture_regions.float16_regions``. A mention that sets nothing — a comparison ``policy.name ==
"mixed_float16"``, a dict key, prose, a comment, an error message, an ``os.environ.get`` of the
switch, the switch set to ``"0"`` — is not an entry point; a docstring example that sets the
policy is documentation of the module and counts.

The scan works on bytes with regular expressions (no parse): every file is read once per
project and process, and only files an entry point reaches have their imports read.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from mpfix import safe_read
from mpfix.project.entries import (
    Entry, Defs, line_of, may_switch, notebook_code, entries_in, imports_in, policy_in_entries,
)
from mpfix.project.files import TestKind, path_forms, test_kind
from mpfix.project.reach_calls import is_call_of as _is_call_of
from mpfix.project.reach_records import ReachRecords
from mpfix.project.kinds import Policy


# -- the project ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reach:
    """A file's policy and why: the entry point that reaches it (or that none does).

    ``fixtures`` is None when the whole file runs under the policy. A test module that only
    sets or takes the policy in some of its tests runs only those under it: then ``fixtures``
    holds the policy fixtures it takes (maybe none), and ``float16_regions`` finds those tests.
    """

    policy: Policy
    why: str
    fixtures: tuple[str, ...] | None = None

    @property
    def partial(self) -> bool:
        return self.fixtures is not None

    def key(self) -> str:
        """What decides findings, for cache keys."""
        return str(self.policy) if self.fixtures is None else f"{self.policy}:tests:{','.join(self.fixtures)}"


@dataclass
class ProjectReach:
    """Every file of one project that some entry point reaches, with the path that leads there."""

    root: Path
    reached: dict[str, Reach] = field(default_factory=dict)  # absolute path -> how it is reached
    entries: list[str] = field(default_factory=list)  # "path:line what", for messages

    @property
    def policy(self) -> Policy:
        """The strongest policy any file of the project runs under (asked once per checked file: the first
        float16 file ends the loop, and the entry points usually come first)."""
        strongest = Policy.NONE
        for reach in self.reached.values():
            if reach.policy is Policy.FLOAT16:
                return Policy.FLOAT16
            strongest = Policy.BFLOAT16
        return strongest

    def reach_for(self, path: Path | str) -> Reach:
        for form in path_forms(path):
            found = self.reached.get(form)
            if found is not None:
                return found
        if self.entries:
            shown = ", ".join(self.entries[:3]) + (", …" if len(self.entries) > 3 else "")
            return Reach(Policy.NONE, f"no float16 entry point of the project reaches it (entry points: {shown})")
        return Reach(Policy.NONE, "nothing in the project sets a mixed policy")


class _Project:
    def __init__(self, root: Path, files: list[Path]) -> None:
        self.root = root
        self.files = [os.path.abspath(f) for f in files]
        self._data: dict[str, bytes] = {}
        self._imports: dict[str, list[str]] = {}
        self._importers: dict[str, set[str]] | None = None
        self._shown: dict[str, str] = {}  # file -> ``display``
        self._packages: dict[str, list[str]] = {}  # dotted -> ``_with_packages``
        self.modules: dict[str, str] = {}  # dotted name -> file
        self.records = ReachRecords(root)  # each file's entry points and imports, kept between runs
        self._module_of: dict[str, str] = {}
        present = set(self.files)
        package_of: dict[str, str | None] = {}
        for file in self.files:
            if not file.endswith(".py"):
                continue
            folder, name = os.path.split(file)
            stem = name[:-3]
            dotted = self._package(folder, present, package_of)
            parts = [p for p in (dotted, None if stem == "__init__" else stem) if p]
            if parts:
                self.modules.setdefault(".".join(parts), file)
                self._module_of[file] = ".".join(parts)
        # The project root on sys.path (an editable install, a run from the root): a module is also its path
        # from the root, through namespace packages (a folder without __init__.py: `third_party/`) and above
        # a root that is itself a package folder (tensorflow/examples: `from tensorflow_examples.lite.model_maker
        # .third_party.efficientdet import utils`).
        root_text = os.path.abspath(root)
        for file in self.files:
            relative = os.path.relpath(file, root_text) if file.endswith(".py") else ""
            parts = relative[:-3].split(os.sep) if relative and not relative.startswith("..") else []
            if parts and parts[-1] == "__init__":
                parts.pop()
            if parts and all(p.isidentifier() for p in parts):
                self.modules.setdefault(".".join(parts), file)

    def _package(self, folder: str, present: set[str], memo: dict[str, str | None]) -> str | None:
        """The dotted package a folder is (None: not a package, e.g. the project root or scripts/)."""
        if folder in memo:
            return memo[folder]
        result = None
        if os.path.join(folder, "__init__.py") in present:
            parent, name = os.path.split(folder)
            above = self._package(parent, present, memo) if parent != folder else None
            result = f"{above}.{name}" if above else name
        memo[folder] = result
        return result

    def data(self, file: str) -> bytes:
        found = self._data.get(file)
        if found is None:
            try:
                found = safe_read.read_bytes(file, root=self.root)
            except OSError:
                found = b""
            self._data[file] = found
        return found

    def code(self, file: str) -> bytes:
        data = self.data(file)
        return notebook_code(data) if file.endswith(".ipynb") else data

    def display(self, file: str) -> str:
        found = self._shown.get(file)
        if found is None:  # once per file: every reached file's chain shows the files on its way
            try:
                found = Path(file).relative_to(self.root).as_posix()
            except ValueError:
                found = file
            self._shown[file] = found
        return found

    def module_of(self, file: str) -> str | None:
        return self._module_of.get(file)

    def imported_files(self, file: str) -> list[str]:
        """Project files that importing ``file`` runs (the modules it imports and their packages)."""
        found = self._imports.get(file)
        if found is not None:
            return found
        out: list[str] = []
        folder = os.path.dirname(file)
        own = self._own_package(file)
        for level, module, names in self.records.imports(file, lambda: imports_in(self.code(file))):
            if level:
                base = own.split(".") if own else []
                if level > 1:
                    base = base[: len(base) - (level - 1)] if len(base) >= level - 1 else []
                dotted = ".".join([*base, module] if module else base)
                candidates = [f"{dotted}.{n}" if dotted else n for n in names] + ([dotted] if dotted else [])
                sibling_folder = folder
                for _ in range(level - 1):
                    sibling_folder = os.path.dirname(sibling_folder)
                if not own:  # relative import outside a package: resolve by folder
                    out.extend(self._by_folder(sibling_folder, module, names))
            else:
                candidates = [f"{module}.{n}" for n in names] + [module]
                out.extend(self._by_folder(folder, module, names))  # scripts import their neighbours
            for candidate in candidates:
                out.extend(self._with_packages(candidate))
        self._imports[file] = found = list(dict.fromkeys(f for f in out if f != file))
        return found

    def in_package(self, file: str) -> bool:
        """Whether ``file`` is part of a package (not a script or tutorial beside no ``__init__.py``)."""
        return os.path.join(os.path.dirname(file), "__init__.py") in self._present

    def importers(self) -> dict[str, set[str]]:
        """For each file, the files that import it (every file's imports read, once)."""
        if self._importers is None:
            self._importers = {}
            for file in self.files:
                if file.endswith(".py") or file.endswith(".ipynb"):
                    for imported in self.imported_files(file):
                        self._importers.setdefault(imported, set()).add(file)
        return self._importers

    def _own_package(self, file: str) -> str:
        name = self.module_of(file) or ""
        if file.endswith("__init__.py"):
            return name
        return name.rpartition(".")[0]

    def _with_packages(self, dotted: str) -> list[str]:
        """The file of ``dotted`` and of every package above it (importing a.b.c runs a and a.b); the list is
        shared between callers, which only read it."""
        out = self._packages.get(dotted)
        if out is None:
            out = self._packages[dotted] = []
            parts = dotted.split(".")
            for i in range(1, len(parts) + 1):
                found = self.modules.get(".".join(parts[:i]))
                if found is not None:
                    out.append(found)
        return out

    def _by_folder(self, folder: str, module: str, names: tuple[str, ...]) -> list[str]:
        # A candidate is a file below ``folder`` whose first step is the module's head (or a name): where the
        # folder holds no such entry, none is present (most imports of a script's folder: ``import tensorflow``).
        entries = self._entries().get(folder)
        if entries is not None:
            if module:
                if module.partition(".")[0] not in entries:
                    return []
            elif not any(n in entries for n in names):
                return []
        out = []
        base = os.path.join(folder, *module.split(".")) if module else folder
        for candidate in [_join(base, n) for n in names] + ([base] if module else []):
            for file in (candidate + ".py", _join(candidate, "__init__.py")):
                if file in self._present:
                    out.append(file)
        return out

    def _entries(self) -> dict[str, set[str]]:
        """Each folder at or below the root -> the first steps of the paths of the project's ``.py`` files below it
        (``name`` of ``name.py``, a subfolder's name): every such path, so a name not among them leads to none."""
        found = getattr(self, "_entries_memo", None)
        if found is None:
            found = self._entries_memo = {}
            root = os.path.abspath(self.root)
            below = os.path.join(root, "")
            for file in self.files:
                if not file.endswith(".py") or not file.startswith(below):
                    continue  # (a file outside the root: its folders are no keys, and are looked up in full)
                folder, name = os.path.split(file)
                found.setdefault(folder, set()).add(name[:-3])
                while len(folder) > len(root):
                    folder, name = os.path.split(folder)
                    found.setdefault(folder, set()).add(name)
        return found

    @property
    def _present(self) -> set[str]:
        present = getattr(self, "_present_set", None)
        if present is None:
            present = self._present_set = set(self.files)
        return present


def _posix_join(base: str, name: str) -> str:
    """``posixpath.join(base, name)``, without its generality where the common case allows (a folder that does not
    end with the separator, a non-empty name that does not start with it: the two joined by one separator)."""
    if name and base and name[0] != "/" and base[-1] != "/":
        return f"{base}/{name}"
    return posixpath.join(base, name)


_join = _posix_join if os.path is posixpath else os.path.join
_MAX_SETTER_ROUNDS = 3


def scan_project(root: Path, files: list[Path]) -> ProjectReach:
    """Which of ``files`` (the project's, under ``root``) run under a mixed policy, and why."""
    project = _Project(root, files)
    try:
        return _scan(project, root)
    finally:
        project.records.save()


def _entries_in(project: _Project, file: str) -> list[Entry]:
    data = project.data(file)
    if file.endswith(".ipynb"):
        # A notebook's JSON escapes quotes; its code cells are read only when it may switch something.
        data = project.code(file) if may_switch(data) else b""
    return entries_in(data, conftest=os.path.basename(file) == "conftest.py")


def _scan(project: _Project, root: Path) -> ProjectReach:
    result = ProjectReach(root=root)
    entries: dict[str, list[Entry]] = {}
    for file in project.files:
        found = project.records.entries(file, lambda: _entries_in(project, file))
        if found:
            entries[file] = found
    if not entries:
        return result
    _callers_of_setters(project, entries)
    _importers_of_import_setters(project, entries)
    for file, found in entries.items():
        for entry in found:
            if entry.scope == "global":
                result.entries.append(f"{project.display(file)}:{entry.line}")
    for policy in (Policy.FLOAT16, Policy.BFLOAT16):
        _reach_by_imports(project, entries, policy, result)
        _reach_by_fixtures(project, entries, policy, result)
    return result


def _callers_of_setters(project: _Project, entries: dict[str, list[Entry]]) -> None:
    """Files that call a project function which switches a policy on become entry points too.

    A call counts as ``name(...)`` (not a method of something else: ``strategy.run(`` is no call
    of a module's ``run``) or ``module.name(...)``, in a file that imports the defining module.
    """
    # Per policy: a function that returns "mixed_bfloat16" on one branch and "mixed_float16" on another
    # (a `get_precision(strategy)` helper) makes its callers entry points of both.
    done: set[tuple[str, str, Policy]] = set()
    for _ in range(_MAX_SETTER_ROUNDS):
        # Test functions are called by the test runner, and dunder methods by Python: not by name.
        setters: list[tuple[str, str, Entry]] = []
        for file, found in list(entries.items()):
            for entry in found:
                name = entry.function
                if (entry.scope != "global" or not name or name.startswith(("__", "test"))
                        or (file, name, entry.policy) in done):
                    continue
                done.add((file, name, entry.policy))
                setters.append((file, name, entry))
        if not setters:
            return
        importers = project.importers()
        for file, name, entry in setters:
            stem = os.path.basename(file).rpartition(".")[0]
            module = os.path.basename(os.path.dirname(file)) if stem == "__init__" else stem
            call = re.compile(re.escape(name.encode()))  # a literal: a fast search
            prefix = module.encode() + b"."
            for other in sorted(importers.get(file, ())):
                code = project.code(other)
                match = next((m for m in call.finditer(code) if _is_call_of(code, m.start(), m.end(), prefix)), None)
                if match is None:
                    continue
                entries.setdefault(other, []).append(Entry(
                    entry.policy, line_of(code, match.start()),
                    f"calls {name}() of {project.display(file)}, which {entry.what}",
                    function=Defs(code).enclosing(match.start())))


# A policy setter called by a module's top-level code (the call starts a line at column 0: not in a function, not
# under `if __name__ == "__main__":`): importing the module sets the policy.
_TOP_LEVEL_SETTER = re.compile(rb"^(?:[A-Za-z_][\w.]*\.)?(?:set_global_policy|set_dtype_policy)[ \t]*\(", re.M)


def _importers_of_import_setters(project: _Project, entries: dict[str, list[Entry]]) -> None:
    """Files that import a module whose top-level code sets a policy become entry points too (one step: the
    importer itself, not the files importing it). Test files and notebooks are left out."""
    importers = None  # built only when some module sets a policy at import (a serial cost in the parent)
    for file, found in list(entries.items()):
        at_import = [e for e in found if e.scope == "global" and e.function is None and not e.in_test]
        if not at_import or file.endswith(".ipynb") or not _TOP_LEVEL_SETTER.search(project.code(file)):
            continue
        importers = project.importers() if importers is None else importers
        module = os.path.basename(file).rpartition(".")[0].encode()
        for other in sorted(importers.get(file, ())):
            if not _is_test_file(other) and not other.endswith(".ipynb"):
                code = project.code(other)
                statement = re.search(rb"^[ \t]*(?:from|import)[ \t]+[\w.]*" + re.escape(module), code, re.M)
                line = line_of(code, statement.start()) if statement else 1
                entries.setdefault(other, []).extend(
                    Entry(e.policy, line, f"imports {project.display(file)}, whose top-level code {e.what}")
                    for e in at_import)


def _reach_by_imports(project: _Project, entries: dict[str, list[Entry]], policy: Policy,
                      result: ProjectReach) -> None:
    queue: deque[str] = deque()
    parent: dict[str, str | None] = {}
    origin: dict[str, tuple[str, Entry]] = {}
    for file, found in entries.items():
        entry = next((e for e in found if e.scope == "global" and e.policy is policy), None)
        if entry is not None and file not in result.reached:
            parent[file] = None
            origin[file] = (file, entry)
            queue.append(file)
    while queue:
        file = queue.popleft()
        entry_file, entry = origin[file]
        if file not in result.reached:
            fixtures = None
            if parent[file] is None:
                why = f"entry point: {entry.what} (line {entry.line})"
                own = [e for e in entries[file] if e.policy is policy and e.scope == "global"]
                if _is_test_file(file) and all(e.in_test for e in own):
                    fixtures = ()  # only the tests that set it run under it
                    why += "; only its tests that set the policy count"
            else:
                chain = []
                step = parent[file]
                while step is not None and step != entry_file:
                    chain.append(project.display(step))
                    step = parent[step]
                via = f" via {' → '.join(reversed(chain[:4]))}{' → …' if len(chain) > 4 else ''}" if chain else ""
                why = (f"imported from {project.display(entry_file)}, which {entry.what} "
                       f"(line {entry.line}){via}")
            result.reached[file] = Reach(policy, why, fixtures)
        for imported in project.imported_files(file):
            if imported not in parent:
                parent[imported] = file
                origin[imported] = origin[file]
                queue.append(imported)


_PARAMS = re.compile(rb"def[ \t]+\w+[ \t]*\(([^)]*)\)", re.S)


def _takes_fixture(code: bytes, name: str) -> bool:
    needle = name.encode()
    if needle not in code:
        return False
    word = re.compile(rb"\b" + re.escape(needle) + rb"\b")
    if any(word.search(params) for params in _PARAMS.findall(code)):
        return True
    return re.search(rb"usefixtures\([^)]*['\"]" + re.escape(needle) + rb"['\"]", code) is not None


def _is_test_file(file: str) -> bool:
    """A module pytest collects or configures (the one predicate, ``mpfix.project.files``): a
    fixture reaches tests, which live in such modules; a helper in a tests folder is library code here."""
    return test_kind(file) is TestKind.MODULE


def _fixture_folders(project: _Project, file: str) -> list[str]:
    """Folders whose tests can take the fixtures ``file`` defines: a conftest's own, or those of
    the conftests that import ``file`` (``from pkg.test_utils import *``, a common layout)."""
    if os.path.basename(file) == "conftest.py":
        return [os.path.dirname(file) + os.sep]
    return [os.path.dirname(c) + os.sep for c in sorted(project.importers().get(file, ()))
            if os.path.basename(c) == "conftest.py"]


def _reach_by_fixtures(project: _Project, entries: dict[str, list[Entry]], policy: Policy,
                       result: ProjectReach) -> None:
    """Tests parametrised over the policy, and the library modules they import.

    A test that takes the fixture runs what it imports under the policy (the library's own tests
    running its layers in float16), so those modules are reached; other tests, scripts, tutorials
    and notebooks are not, even when they import the same library.
    """
    tests: list[tuple[str, str]] = []  # (test file, why)
    for file, found in entries.items():
        for entry in found:
            if entry.policy is not policy or entry.scope == "global" or file in result.reached:
                continue
            why = f"its tests are parametrised: {entry.what} (line {entry.line})"
            partial = () if _is_test_file(file) and os.path.basename(file) != "conftest.py" else None
            result.reached[file] = Reach(policy, why, partial)
            if entry.scope == "module" or _is_test_file(file):
                tests.append((file, why))
    for file, found in entries.items():
        for entry in found:
            if entry.policy is not policy or entry.scope != "fixture" or entry.fixture is None:
                continue
            folders = _fixture_folders(project, file)
            importers = project.importers().get(file, set()) if os.path.basename(file) != "conftest.py" else set()
            names = {entry.fixture}
            # Fixtures that take the policy fixture carry it on (one level per pass, a few passes).
            for _ in range(3):
                for other in project.files:
                    if any(other.startswith(f) for f in folders) and os.path.basename(other) == "conftest.py":
                        code = project.code(other)
                        for match in re.finditer(rb"@pytest\.fixture[^\n]*\n\s*def[ \t]+(\w+)[ \t]*\(([^)]*)\)", code):
                            if any(re.search(rb"\b" + re.escape(n.encode()) + rb"\b", match.group(2)) for n in names):
                                names.add(match.group(1).decode("ascii", "replace"))
            where = f"{project.display(file)}:{entry.line}"
            for other in project.files:
                if other in result.reached or not _is_test_file(other):
                    continue
                if not (any(other.startswith(f) for f in folders) or other in importers):
                    continue
                code = project.code(other)
                used = next((n for n in sorted(names) if _takes_fixture(code, n)), None)
                if used is None and not entry.autouse:
                    continue
                how = f"uses fixture `{used}`" if used else f"runs under autouse fixture `{entry.fixture}`"
                why = f"test {how}, which {where} parametrises over the policy"
                result.reached[other] = Reach(policy, why, None if used is None else tuple(sorted(names)))
                tests.append((other, why))
    # What those tests import, through library modules only (never another test or a script).
    queue = deque((test, test) for test, _ in tests)
    origin = dict(tests)
    while queue:
        file, test = queue.popleft()
        for imported in project.imported_files(file):
            if imported in result.reached or _is_test_file(imported) or not project.in_package(imported):
                continue
            result.reached[imported] = Reach(policy, f"imported from {project.display(test)}, a test that runs "
                                                     f"under the policy ({origin[test]})")
            queue.append((imported, test))


def reach_in_text(text: str, path: Path | str | None = None) -> Reach:
    """A file's own entry points only (the project around it is not consulted)."""
    found = entries_in(text.encode("utf-8", "surrogateescape"), conftest=True)
    policy = policy_in_entries(found)
    if policy is Policy.NONE:
        return Reach(Policy.NONE, "the file sets no mixed policy (the project was not consulted)")
    first = next(e for e in found if e.policy is policy)
    why = f"entry point: {first.what} (line {first.line})"
    own = [e for e in found if e.policy is policy]
    if path is not None and _is_test_file(str(path)) and os.path.basename(str(path)) != "conftest.py" and all(
            e.scope == "module" or (e.scope == "global" and e.in_test) for e in own):
        return Reach(policy, why + "; only its tests that set the policy count", ())
    return Reach(policy, why)
