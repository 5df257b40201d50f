"""A cache of clean results (Ruff's model): files known to have nothing to report are not parsed again.

Clean results (no findings, no errors, nothing to fix) are stored as bare keys;
``check`` also stores the findings of files that have some (as JSON, never
pickle: a cache folder is data a checkout could ship), so a warm ``check`` parses
nothing that did not change. A key is a hash of the file's bytes together with
everything else that can change what mpfix says about those bytes:

* the settings (one cache file per settings hash): mpfix's version, a
  fingerprint of the rule and engine modules (size + mtime, so an edited or
  newly installed rule invalidates the cache even before the version is bumped),
  the selected rule codes, the engine options and the Keras generation that
  ``--keras auto`` finds installed on this machine;
* per file: the codes ``per-file-ignores`` switches off, the project's mixed
  policy when it can matter (see ``Keyer.key``), and with ``--keras auto`` the
  Keras target the project's declared dependencies decide (``mpfix.declared``).

The mode (check/diff/apply) is left out on purpose: a file with no findings has
nothing to fix, so the three modes agree on it.

Entries live in ``.mpfix_cache/<version>/<settings-hash>`` under the project
root (or ``$MPFIX_CACHE_DIR``), written atomically; the folder holds a
``.gitignore`` of ``*`` so it never shows up in ``git status``. A cache that
cannot be read or written is silently not used: it only ever saves time.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mpfix import __version__
from mpfix.cache_folder import code_fingerprint as _code_fingerprint
from mpfix.cache_folder import ensure_folder as _ensure_folder

CACHE_DIR_NAME = ".mpfix_cache"
ENV_CACHE_DIR = "MPFIX_CACHE_DIR"
_MAGIC = b"MPFIXC1\n"
_DIGEST = 16
# Past this many entries a cache file keeps only what the current run used,
# so edits that accumulate over months cannot grow it without bound.
MAX_ENTRIES = 200_000
_PROJECT_MARKERS = ("pyproject.toml", ".git")


def cache_dir_for(files: list[Path], cwd: Path | None = None) -> Path:
    """``$MPFIX_CACHE_DIR``, else ``.mpfix_cache`` in the project that holds ``files``.

    The project is the nearest folder with a ``pyproject.toml`` or ``.git`` above
    the files' common folder; the current directory when there is none.
    """
    override = os.environ.get(ENV_CACHE_DIR)
    if override:
        return Path(override)
    cwd = cwd or Path.cwd()
    if files:
        try:
            common = Path(os.path.commonpath([os.path.abspath(f.parent) for f in files]))
        except ValueError:  # different drives (Windows)
            common = cwd
        for folder in [common, *common.parents]:
            if any((folder / marker).exists() for marker in _PROJECT_MARKERS):
                return folder / CACHE_DIR_NAME
    return cwd / CACHE_DIR_NAME


def settings_key(job) -> str:
    """Hash of everything besides the file that decides a result (see the module docstring)."""
    from mpfix import target

    parts = (
        __version__,
        _code_fingerprint(),
        sorted(job.rule_codes),
        repr(job.options),
        target.installed(),  # what --keras auto finds installed, and why
    )
    return hashlib.blake2b(repr(parts).encode(), digest_size=_DIGEST).hexdigest()


@dataclass
class Keyer:
    """Computes per-file cache keys; picklable, so workers can use it too."""

    settings: str
    clean: frozenset[bytes] = frozenset()
    # Triggers of the rules that run only where float16 is reachable. The
    # project's policy can change their findings, and so the key, only when
    # one of them is a prefilter candidate (the engine's rule for consulting
    # the project, engine._run/_policy). A file that names a policy itself
    # still gets the project's in its key: one scan per project, never stale.
    float16_triggers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    project_policy: bool = False
    # What the project declares is part of each key: the Keras target (with --keras auto) and the
    # newest TensorFlow it allows (MP306 stays silent below TF 2.9) both come from it.
    declared_target: bool = False
    _roots: dict[str, str] = field(default_factory=dict, repr=False)
    _projects: dict[str, bool] = field(default_factory=dict, repr=False)  # roots whose float16 facts were asked

    def key(self, path: Path, data: bytes, ignored: tuple[str, ...] = ()) -> bytes:
        """The key a result for ``data`` is stored under: the bytes, the ignored codes and the
        project's facts about the file (``mpfix.project.facts.ProjectFileFacts``: the record the
        engine hands the rules, so nothing another file decides is left out; review finding F1)."""
        return self._key(data, ignored, self._facts(path, self._float16_triggered(data, ignored)))

    def lookup_keys(self, path: Path, data: bytes, ignored: tuple[str, ...] = ()):
        """The keys ``data`` can have been stored under, cheapest first; one of them is ``key()``.

        A file no float16 trigger matches is stored with the facts that need no float16 rule,
        one that some trigger matches with all of them; the same bytes always take the same
        side. So a lookup can try both keys instead of running the triggers over the file (a
        third of a warm run). The second key needs the project's facts; until some file has
        needed them, the triggers decide whether this one does, so a project is never scanned
        for nothing.
        """
        yield self._key(data, ignored, self._facts(path, False))
        if not self.float16_triggers:
            return
        if self._root(path) in self._projects or self._float16_triggered(data, ignored):
            yield self._key(data, ignored, self._facts(path, True))

    def _facts(self, path: Path, float16_rules: bool) -> str:
        from mpfix.project.facts import file_facts

        if float16_rules:
            self._projects[self._root(path)] = True
        return file_facts(path, consult_project=self.project_policy, float16_rules=float16_rules).key()

    @staticmethod
    def _key(data: bytes, ignored: tuple[str, ...], facts: str) -> bytes:
        digest = hashlib.blake2b(data, digest_size=_DIGEST)
        digest.update(b"\0" + ",".join(ignored).encode())
        digest.update(b"\0" + facts.encode())
        return digest.digest()

    def _float16_triggered(self, data: bytes, ignored: tuple[str, ...]) -> bool:
        # Bytes, not decoded text: the triggers are ASCII, and a false positive here
        # only costs a project scan, never a wrong key.
        from mpfix.codemods.base import triggered

        return any(
            not any(code.startswith(i) for i in ignored) and triggered(triggers, data)
            for code, triggers in self.float16_triggers
        )

    def _root(self, path: Path) -> str:
        from mpfix import policy as policies

        folder = str(path.parent)
        root = self._roots.get(folder)
        if root is None:
            root = self._roots[folder] = str(policies.project_root(path))
        return root


class Cache:
    """The set of clean keys for one settings hash, loaded once and saved once per run."""

    def __init__(self, directory: Path, job) -> None:
        self.directory = directory
        self.keyer = _keyer_for(job)
        self.file = directory / __version__ / self.keyer.settings
        from mpfix import policy as policies

        policies.use_store(directory / __version__)  # project scans for float16 reachability
        self.loaded = self._load()
        self.keyer.clean = frozenset(self.loaded)
        self.used: set[bytes] = set()
        self._loaded_findings: dict[str, list] | None = None
        self._used_findings: dict[str, list] = {}

    def _load(self) -> set[bytes]:
        try:
            data = self.file.read_bytes()
        except OSError:
            return set()
        body = data[len(_MAGIC):]
        if not data.startswith(_MAGIC) or len(body) % _DIGEST:
            return set()  # written by another format or damaged: start afresh
        return {body[i:i + _DIGEST] for i in range(0, len(body), _DIGEST)}

    # -- findings of files that have some (check mode) ---------------------------------
    @property
    def _findings_file(self) -> Path:
        return self.file.with_name(self.file.name + ".findings.json")

    def _findings(self) -> dict[str, list]:
        if self._loaded_findings is None:
            try:
                data = json.loads(self._findings_file.read_text(encoding="utf-8"))
                self._loaded_findings = data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self._loaded_findings = {}
        return self._loaded_findings

    @staticmethod
    def _findings_key(key: bytes, want_edits: bool) -> str:
        return key.hex() + ("+edits" if want_edits else "")

    def cached_findings(self, key: bytes, want_edits: bool, filename: str) -> list | None:
        """The findings stored for ``key``, attributed to ``filename``; None when unknown."""
        raw = self._findings().get(self._findings_key(key, want_edits))
        if raw is None:
            return None
        try:
            findings = [finding_from_dict(item, filename) for item in raw]
        except (KeyError, TypeError, ValueError):
            return None  # another format or damaged: recompute
        self._used_findings[self._findings_key(key, want_edits)] = raw
        return findings

    def add_findings(self, key: bytes, want_edits: bool, findings: list) -> None:
        self._used_findings[self._findings_key(key, want_edits)] = [finding_to_dict(f) for f in findings]

    @property
    def empty(self) -> bool:
        """Nothing stored for these settings yet (a cold run: no file can be answered from here)."""
        return not self.loaded and not self._findings_file.exists()

    def hit(self, key: bytes) -> bool:
        if key in self.keyer.clean:
            self.used.add(key)
            return True
        return False

    def add(self, keys) -> None:
        self.used.update(keys)

    def save(self) -> None:
        """Write the union of old and new entries atomically; failures are ignored (it is a cache)."""
        self._save_findings()
        entries = self.loaded | self.used
        if len(entries) > MAX_ENTRIES:
            entries = self.used
        if entries == self.loaded:
            return
        try:
            _ensure_folder(self.directory)
            self.file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.file.parent)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(_MAGIC + b"".join(sorted(entries)))
                os.replace(tmp, self.file)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError:
            pass


    def _save_findings(self) -> None:
        if not self._used_findings:
            return
        old = self._findings()
        entries = {**old, **self._used_findings}
        if len(entries) > MAX_ENTRIES // 10:
            entries = dict(self._used_findings)
        if entries == old:
            return
        try:
            _ensure_folder(self.directory)
            self.file.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(self._findings_file, json.dumps(entries, separators=(",", ":")).encode())
        except OSError:
            pass


def _write_atomic(target: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def finding_to_dict(finding) -> dict:
    fix = None
    if finding.fix is not None:
        fix = {"safety": str(finding.fix.safety), "description": finding.fix.description,
               "imports": list(finding.fix.imports)}
    return {
        "code": finding.code, "message": finding.message, "cell": finding.cell,
        "start": [finding.start.line, finding.start.column], "end": [finding.end.line, finding.end.column],
        "fix": fix,
        "edits": [[e.start.line, e.start.column, e.end.line, e.end.column, e.content] for e in finding.edits],
    }


def finding_from_dict(item: dict, filename: str):
    from mpfix.findings import Edit, Finding, Fix, FixSafety, Position

    fix = item["fix"]
    return Finding(
        code=item["code"], message=item["message"], filename=filename, cell=item["cell"],
        start=Position(*item["start"]), end=Position(*item["end"]),
        fix=None if fix is None else Fix(changes={}, safety=FixSafety(fix["safety"]),
                                         description=fix["description"], imports=tuple(fix["imports"])),
        edits=[Edit(Position(a, b), Position(c, d), content) for a, b, c, d, content in item["edits"]],
    )


def _keyer_for(job) -> Keyer:
    from mpfix.codemods import all_rules

    rules = [r for r in all_rules() if r.code in job.rule_codes]
    return Keyer(
        settings=settings_key(job),
        float16_triggers=tuple((r.code, tuple(r.triggers)) for r in rules if r.requires_float16),
        project_policy=job.options.policy is None and job.options.project_policy,
        declared_target=True,
    )
