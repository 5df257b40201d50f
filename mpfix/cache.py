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
import hmac
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mpfix import __version__, safe_read
from mpfix.cache_folder import code_fingerprint as _code_fingerprint
from mpfix.cache_folder import ensure_folder as _ensure_folder

CACHE_DIR_NAME = ".mpfix_cache"
ENV_CACHE_DIR = "MPFIX_CACHE_DIR"
_MAGIC = b"MPFIXC1\n"
_DIGEST = 16
# Past this many entries a cache file keeps only what the current run used,
# so edits that accumulate over months cannot grow it without bound.
MAX_ENTRIES = 200_000
_MAX_FINDINGS_BYTES = 256 << 20
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
    secret: bytes = b""  # keys every hash (``_secret``)
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
        return self._key(path, data, ignored, self._facts(path, self._float16_triggered(data, ignored)))

    def lookup_keys(self, path: Path, data: bytes, ignored: tuple[str, ...] = ()):
        """The keys ``data`` can have been stored under, cheapest first; one of them is ``key()``.

        A file no float16 trigger matches is stored with the facts that need no float16 rule,
        one that some trigger matches with all of them; the same bytes always take the same
        side. So a lookup can try both keys instead of running the triggers over the file (a
        third of a warm run). The second key needs the project's facts; until some file has
        needed them, the triggers decide whether this one does, so a project is never scanned
        for nothing.
        """
        yield self._key(path, data, ignored, self._facts(path, False))
        if not self.float16_triggers:
            return
        if self._root(path) in self._projects or self._float16_triggered(data, ignored):
            yield self._key(path, data, ignored, self._facts(path, True))

    def _facts(self, path: Path, float16_rules: bool) -> str:
        from mpfix.project.facts import file_facts

        if float16_rules:
            self._projects[self._root(path)] = True
        return file_facts(path, consult_project=self.project_policy, float16_rules=float16_rules).key()

    def _key(self, path: Path, data: bytes, ignored: tuple[str, ...], facts: str) -> bytes:
        # Keyed with this machine's secret (``_secret``) and bound to the file's path: a key (so an
        # entry) a checkout ships, or one made for another file, never matches.
        digest = hashlib.blake2b(data, digest_size=_DIGEST, key=self.secret)
        digest.update(b"\0" + os.path.abspath(path).encode("utf-8", "surrogateescape"))
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

        # A cache folder a checkout shipped as (or with) symbolic links is neither read nor written.
        self.usable = _usable(directory)
        policies.use_store(directory / __version__ if self.usable else None)  # project scans
        self.loaded = self._load() if self.usable else set()
        self.keyer.clean = frozenset(self.loaded)
        self.used: set[bytes] = set()
        self._loaded_findings: dict[str, list] | None = None
        self._used_findings: dict[str, list] = {}

    def _load(self) -> set[bytes]:
        try:
            data = safe_read.read_bytes(self.file, (MAX_ENTRIES + 1) * _DIGEST + len(_MAGIC), self.directory)
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
            self._loaded_findings = {}
            if self.usable:
                try:
                    data = json.loads(safe_read.read_text(self._findings_file, _MAX_FINDINGS_BYTES, self.directory))
                    self._loaded_findings = data if isinstance(data, dict) else {}
                except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply
                    pass
        return self._loaded_findings

    @staticmethod
    def _findings_key(key: bytes, want_edits: bool) -> str:
        return key.hex() + ("+edits" if want_edits else "")

    def cached_findings(self, key: bytes, want_edits: bool, filename: str) -> list | None:
        """The findings stored for ``key``, attributed to ``filename``; None when unknown."""
        name = self._findings_key(key, want_edits)
        entry = self._findings().get(name)
        if entry is None:
            return None
        raw = _verified(entry, self.keyer.secret, name)
        if raw is None:
            return None  # forged, another format or damaged: recomputed, and rewritten when saved
        try:
            findings = [finding_from_dict(item, filename) for item in raw]
        except (KeyError, TypeError, ValueError):
            return None
        self._used_findings[name] = entry
        return findings

    def add_findings(self, key: bytes, want_edits: bool, findings: list) -> None:
        name = self._findings_key(key, want_edits)
        self._used_findings[name] = _sealed([finding_to_dict(f) for f in findings], self.keyer.secret, name)

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
        if not self.usable:
            return
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
        # Entries that fail their check are dropped here, so a damaged or forged file is rewritten.
        entries = {name: entry for name, entry in old.items() if _verified(entry, self.keyer.secret, name) is not None}
        entries.update(self._used_findings)
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


def _seal(secret: bytes, name: str, body: str) -> str:
    return hashlib.blake2b(f"{name}\0{body}".encode(), key=secret, digest_size=_DIGEST).hexdigest()


def _sealed(raw: list, secret: bytes, name: str) -> dict:
    """A findings entry with its seal: a keyed hash of the entry and its key (the file's content
    hash, path and settings), which a forged or moved entry cannot reproduce without the secret."""
    return {"findings": raw, "seal": _seal(secret, name, json.dumps(raw, sort_keys=True, separators=(",", ":")))}


def _verified(entry, secret: bytes, name: str) -> list | None:
    """The findings of a sealed entry that passes its schema and seal; None otherwise."""
    if not isinstance(entry, dict) or not isinstance(entry.get("seal"), str):
        return None
    raw = entry.get("findings")
    if not isinstance(raw, list) or not all(_valid_finding(item) for item in raw):
        return None
    try:
        body = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return None
    if not hmac.compare_digest(_seal(secret, name, body), entry["seal"]):
        return None
    return raw


def _is_position(value) -> bool:
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 31 for v in value))


def _valid_finding(item) -> bool:
    """The shape ``finding_to_dict`` writes, with the right types (a cache is data a checkout may ship)."""
    if not isinstance(item, dict) or set(item) != {"code", "message", "fields", "template", "cell", "start", "end",
                                                   "fix", "edits"}:
        return False
    if not _is_template(item["template"]):
        return False
    fields = item["fields"]
    if not (isinstance(fields, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())):
        return False
    if not (isinstance(item["code"], str) and isinstance(item["message"], str)
            and (item["cell"] is None or isinstance(item["cell"], int) and not isinstance(item["cell"], bool))
            and _is_position(item["start"]) and _is_position(item["end"])):
        return False
    fix = item["fix"]
    if fix is not None:
        if not (isinstance(fix, dict) and set(fix) == {"safety", "description", "imports"}
                and fix["safety"] in ("safe", "unsafe", "none") and isinstance(fix["description"], str)
                and isinstance(fix["imports"], list) and all(isinstance(i, str) for i in fix["imports"])):
            return False
    edits = item["edits"]
    return isinstance(edits, list) and all(
        isinstance(e, list) and len(e) == 5 and _is_position(e[0:2]) and _is_position(e[2:4]) and isinstance(e[4], str)
        for e in edits)


def _is_template(value) -> bool:
    """None, or ``[name or None, [note, ...], keras_unknown]`` (``findings.MessageRef``)."""
    if value is None:
        return True
    return (isinstance(value, list) and len(value) == 3 and (value[0] is None or isinstance(value[0], str))
            and isinstance(value[1], list) and all(isinstance(n, str) for n in value[1]) and isinstance(value[2], bool))


def finding_to_dict(finding) -> dict:
    fix = None
    if finding.fix is not None:
        fix = {"safety": str(finding.fix.safety), "description": finding.fix.description,
               "imports": list(finding.fix.imports)}
    return {
        "code": finding.code, "message": finding.message, "fields": dict(finding.fields), "cell": finding.cell,
        "template": None if finding.template is None else [finding.template.name, list(finding.template.notes),
                                                            finding.template.keras_unknown],
        "start": [finding.start.line, finding.start.column], "end": [finding.end.line, finding.end.column],
        "fix": fix,
        "edits": [[e.start.line, e.start.column, e.end.line, e.end.column, e.content] for e in finding.edits],
    }


def finding_from_dict(item: dict, filename: str):
    from mpfix.findings import Edit, Finding, Fix, FixSafety, MessageRef, Position

    fix = item["fix"]
    template = item["template"]
    return Finding(
        code=item["code"], message=item["message"], fields=dict(item["fields"]), filename=filename, cell=item["cell"],
        template=None if template is None else MessageRef(template[0], tuple(template[1]), template[2]),
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
        secret=_secret(),
        float16_triggers=tuple((r.code, tuple(r.triggers)) for r in rules if r.requires_float16),
        project_policy=job.options.policy is None and job.options.project_policy,
        declared_target=True,
    )


ENV_SECRET = "MPFIX_CACHE_SECRET"


def _secret() -> bytes:
    """The key of every cache hash: ``$MPFIX_CACHE_SECRET`` (a CI secret, which builds of pull requests
    from forks do not get), else a random one kept in this user's cache folder (``~/.cache/mpfix``),
    outside any project. Without it a cache shipped in a checkout, or shared between a pull
    request's build and main's, could carry forged entries that hide findings."""
    chosen = os.environ.get(ENV_SECRET)
    if chosen:
        return hashlib.blake2b(chosen.encode(), digest_size=32).digest()
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(home, "mpfix", "cache-secret")
    try:
        secret = safe_read.read_bytes(path, 64, follow_outside=True)
        if len(secret) == 32:
            return secret
    except OSError:
        pass
    secret = os.urandom(32)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secret)
    except FileExistsError:  # written meanwhile by another run: use that one
        try:
            found = safe_read.read_bytes(path, 64, follow_outside=True)
            return found if len(found) == 32 else secret
        except OSError:
            return secret  # this run only: its cache entries will not be reused
    except OSError:
        pass  # read-only home: this run's entries are not reused
    return secret


def _usable(directory: Path) -> bool:
    """False when the cache folder is a symbolic link or holds one (``cache_folder.check_folder``)."""
    from mpfix.cache_folder import check_folder

    try:
        check_folder(directory)
    except OSError:
        return False
    return True
